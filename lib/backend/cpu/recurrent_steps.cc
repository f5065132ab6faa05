#include "lib/backend/cpu/recurrent_steps.h"

#include "lib/backend/delta_net_core.h"
#include "lib/backend/ssm_core.h"

namespace moe {
namespace kernels {

void GatedDeltaStepPortable(float* state, const float* q, const float* k, const float* v,
                            float decay, float beta, int64_t size, float scale, float* y) {
  GatedDeltaHeadStep(state, q, k, v, decay, beta, size, scale, y);
}

void SsmScanStepPortable(float* state, const float* x, const float* b, const float* c, float dt,
                         float a, float d, int64_t head_dim, int64_t state_size, float* y) {
  SsmScanHeadStep(state, x, b, c, dt, a, d, head_dim, state_size, y);
}

}  // namespace kernels

GatedDeltaStepFn GetGatedDeltaStep(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::GatedDeltaStepAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::GatedDeltaStepAvx2 : kernels::GatedDeltaStepPortable;
}

SsmScanStepFn GetSsmScanStep(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::SsmScanStepAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::SsmScanStepAvx2 : kernels::SsmScanStepPortable;
}

}  // namespace moe
