// libmoe_cuda.so's one exported symbol: the table of the CUDA backend's entry points.
#include "lib/backend/cuda/cuda_module.h"

extern "C" __attribute__((visibility("default"))) const moe::cuda::ModuleTable*
moe_cuda_module_v1() {
  static const moe::cuda::ModuleTable table = {
      moe::cuda::kModuleAbi, MOE_BUILD_ID, &moe::cuda::ModuleAvailable, &moe::cuda::ModuleUpload,
      &moe::cuda::ModuleCreateBackend};
  return &table;
}
