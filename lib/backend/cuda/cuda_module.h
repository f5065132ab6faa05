// The CUDA backend ships as a module of its own, libmoe_cuda.so, loaded when a device is asked
// for (cuda_loader.cc): libmoe.so itself needs no CUDA library and loads on any machine, as ONNX
// Runtime's CUDA provider library does. The module and the library come from one build (the
// build id is checked), so the table below passes C++ types.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/cuda_backend.h"

namespace moe::cuda {

inline constexpr int kModuleAbi = 1;
// What a module must have been built as to be used: this project's version, and this struct's
// size (a change of the table's shape changes it).
struct ModuleTable {
  int abi;
  const char* build;
  absl::Status (*available)();
  absl::StatusOr<std::shared_ptr<const DeviceWeights>> (*upload)(absl::Span<const HostTensor>,
                                                                 const DeviceWeightsOptions&);
  absl::StatusOr<std::unique_ptr<Backend>> (*create)(std::shared_ptr<const DeviceWeights>, int);
};

// The module's entry point, looked up by name.
inline constexpr char kModuleEntry[] = "moe_cuda_module_v1";
inline constexpr char kModuleFile[] = "libmoe_cuda.so";

// Inside the module (cuda_backend.cc).
absl::Status ModuleAvailable();
absl::StatusOr<std::shared_ptr<const DeviceWeights>> ModuleUpload(
    absl::Span<const HostTensor> tensors, const DeviceWeightsOptions& options);
absl::StatusOr<std::unique_ptr<Backend>> ModuleCreateBackend(
    std::shared_ptr<const DeviceWeights> weights, int cpu_threads);

}  // namespace moe::cuda
