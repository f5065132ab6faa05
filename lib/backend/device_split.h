// Which of a model's tensors a GPU holds under a memory budget (the CUDA backend's hybrid split),
// as plain host logic the CPU tests check: every tensor but the routed experts first (an error
// when they alone exceed the budget), then whole experts — all of an expert's matrices or none —
// in the order given while they fit (OrderExpertsForDevice puts the hottest first).
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/cuda_backend.h"

namespace moe {

// Whether a type is widened to F32 on the device (F16, BF16: the device's products read F32 or
// quantized blocks).
inline bool WidenedOnDevice(DType t) { return t == DType::kF16 || t == DType::kBF16; }

// The bytes a tensor takes on the device.
size_t DeviceBytes(const HostTensor& t);

struct DeviceSplit {
  std::vector<bool> on_device;  // per tensor
  size_t bytes = 0;             // on the device
  int64_t expert_matrices_on_device = 0, expert_matrices_on_host = 0;
};

absl::StatusOr<DeviceSplit> SplitForDevice(absl::Span<const HostTensor> tensors,
                                           size_t budget_bytes);

}  // namespace moe
