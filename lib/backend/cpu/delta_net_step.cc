#include "lib/backend/cpu/delta_net_step.h"

#include "lib/backend/delta_net_core.h"

namespace moe {
namespace kernels {

void GatedDeltaStepPortable(float* state, const float* q, const float* k, const float* v,
                            float decay, float beta, int64_t size, float scale, float* y) {
  GatedDeltaHeadStep(state, q, k, v, decay, beta, size, scale, y);
}

}  // namespace kernels

GatedDeltaStepFn GetGatedDeltaStep(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::GatedDeltaStepAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::GatedDeltaStepAvx2 : kernels::GatedDeltaStepPortable;
}

}  // namespace moe
