#include "lib/backend/device_split.h"

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace moe {

size_t DeviceBytes(const HostTensor& t) {
  return WidenedOnDevice(t.dtype) ? static_cast<size_t>(t.rows * t.cols) * sizeof(float) : t.bytes;
}

absl::StatusOr<DeviceSplit> SplitForDevice(absl::Span<const HostTensor> tensors,
                                           size_t budget_bytes) {
  DeviceSplit split;
  split.on_device.assign(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].routed_expert) continue;
    split.on_device[i] = true;
    split.bytes += DeviceBytes(tensors[i]);
  }
  if (split.bytes > budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model's weights other than its routed experts take ", split.bytes,
        " bytes of device memory, more than the ", budget_bytes, " bytes they may use"));
  }
  // Each expert's matrices, in the order its first one comes.
  absl::flat_hash_map<int64_t, size_t> group_of;
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HostTensor& t = tensors[i];
    if (!t.routed_expert) continue;
    const int64_t key = (int64_t{t.layer} << 32) | static_cast<uint32_t>(t.expert);
    auto [it, added] = group_of.try_emplace(key, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  for (const std::vector<size_t>& group : groups) {
    size_t bytes = 0;
    for (size_t i : group) bytes += DeviceBytes(tensors[i]);
    const bool fits = split.bytes + bytes <= budget_bytes;
    for (size_t i : group) split.on_device[i] = fits;
    if (fits) split.bytes += bytes;
    (fits ? split.expert_matrices_on_device : split.expert_matrices_on_host) +=
        static_cast<int64_t>(group.size());
  }
  return split;
}

}  // namespace moe
