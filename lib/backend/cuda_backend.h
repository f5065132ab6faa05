// The CUDA backend (issue 21): the forward pass's operations on one GPU (kernels/), its
// activations and K/V caches in device memory, over weights uploaded once per model
// (DeviceWeights). Routed experts whose weights were not uploaded (the device's memory budget ran
// out, or the expert cache reads them from the file into host memory) run on the CPU backend on
// their tokens' rows copied over and back: the hybrid split people run large MoE models with.
// Plain C++: nothing here needs CUDA's headers, and a build without CUDA answers every call with
// why not (cuda_absent.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"

namespace moe {

// A model tensor in host memory, to mirror on the device.
struct HostTensor {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  DType dtype = DType::kF32;
  int64_t rows = 1, cols = 0;  // the last dimension, and the product of the others
  bool routed_expert = false;
  int32_t layer = -1, expert = -1;  // of a routed expert's matrix
};

struct DeviceWeightsOptions {
  int device = 0;
  // Device memory the weights may take: every other weight first, then the routed experts in
  // the order given until it is spent (those left run on the CPU; OrderExpertsForDevice puts the
  // hottest first). 0: the device's free memory less a reserve for activations and K/V (a
  // tenth, at least 1 GiB).
  size_t budget_bytes = 0;
};

struct DeviceWeightsInfo {
  std::string device_name;
  size_t bytes = 0;  // of weights on the device
  int64_t expert_matrices_on_device = 0, expert_matrices_on_host = 0;
};

// The device's copy of a model's weights; shared by the CUDA backends of one model.
class DeviceWeights {
 public:
  virtual ~DeviceWeights() = default;
  virtual const DeviceWeightsInfo& info() const = 0;
};

// OK when this build has the CUDA backend and a device answers; otherwise why not.
absl::Status CudaDeviceAvailable();

// Uploads the tensors (F16 and BF16 ones widened to F32, the type the device's products read;
// quantized ones as stored). FailedPrecondition for the CPU kernels' re-laid row layouts (load
// such models without re-laying), ResourceExhausted when the non-expert weights alone exceed the
// budget.
absl::StatusOr<std::shared_ptr<const DeviceWeights>> UploadWeights(
    absl::Span<const HostTensor> tensors, const DeviceWeightsOptions& options);

// A backend on the weights' device; experts not on it run on a CPU backend of cpu_threads threads.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    std::shared_ptr<const DeviceWeights> weights, int cpu_threads);

}  // namespace moe
