#include "lib/backend/cpu/ssm_scan_step.h"

#include "lib/backend/ssm_core.h"

namespace moe {
namespace kernels {

void SsmScanStepPortable(float* state, const float* x, const float* b, const float* c, float dt,
                         float a, float d, int64_t head_dim, int64_t state_size, float* y) {
  SsmScanHeadStep(state, x, b, c, dt, a, d, head_dim, state_size, y);
}

}  // namespace kernels

SsmScanStepFn GetSsmScanStep(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::SsmScanStepAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::SsmScanStepAvx2 : kernels::SsmScanStepPortable;
}

}  // namespace moe
