#include "lib/runtime/device_placement.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"

namespace moe {

void OrderExpertsForDevice(const RoutingProfile& profile, std::vector<HostTensor>* tensors) {
  absl::flat_hash_map<int64_t, size_t> rank;  // (layer, expert) -> place, hottest 0
  const auto key = [](int64_t layer, int64_t expert) {
    return (layer << 32) | (expert & 0xffffffff);
  };
  const std::vector<ExpertKey> hottest = profile.HottestFirst();
  for (size_t i = 0; i < hottest.size(); ++i) rank[key(hottest[i].layer, hottest[i].expert)] = i;
  const auto place = [&](const HostTensor& t) -> size_t {
    if (!t.routed_expert) return 0;
    const auto it = rank.find(key(t.layer, t.expert));
    // Unprofiled experts after every profiled one; stable_sort keeps their order.
    return it != rank.end() ? 1 + it->second : std::numeric_limits<size_t>::max();
  };
  std::stable_sort(tensors->begin(), tensors->end(),
                   [&](const HostTensor& a, const HostTensor& b) { return place(a) < place(b); });
}

}  // namespace moe
