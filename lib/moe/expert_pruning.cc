#include "lib/moe/expert_pruning.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<PruningPlan> PlanPruning(const RoutingProfile& profile, double keep, int min_kept,
                                        const std::vector<bool>& routed) {
  if (!(keep > 0 && keep <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the share of traffic to keep, ", keep, ", is not in (0, 1]"));
  }
  if (min_kept < 1) {
    return absl::InvalidArgumentError(absl::StrCat("min_kept ", min_kept, " is not >= 1"));
  }
  PruningPlan plan;
  const int n_layer = static_cast<int>(profile.counts.size());
  plan.kept_traffic.assign(n_layer, 1.0);
  for (int l = 0; l < n_layer; ++l) {
    const std::vector<int64_t>& counts = profile.counts[l];
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    if (l >= static_cast<int>(routed.size()) || !routed[l] || total == 0) continue;
    std::vector<int32_t> order(counts.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
    // The share is compared in integers (kept x 1 >= keep x total, rounded up), so keep = 1
    // keeps every expert that was chosen at all.
    const auto needed = static_cast<int64_t>(std::ceil(keep * static_cast<double>(total)));
    int64_t kept = 0;
    size_t n_kept = 0;
    while (n_kept < order.size() && (kept < needed || n_kept < static_cast<size_t>(min_kept))) {
      kept += counts[order[n_kept++]];
    }
    plan.kept_traffic[l] = static_cast<double>(kept) / static_cast<double>(total);
    std::vector<int32_t> gone(order.begin() + n_kept, order.end());
    std::sort(gone.begin(), gone.end());
    for (int32_t e : gone) plan.pruned.push_back({l, e});
  }
  return plan;
}

}  // namespace moe
