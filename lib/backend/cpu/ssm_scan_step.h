// One head's step of Mamba-2's selective scan (ssm_core.h's SsmScanHeadStep) at each SIMD level:
// a prompt runs it once per token, head and layer over a state of head_dim x state_size floats,
// which stays in the core's cache while a thread walks one head through the tokens; the vector
// kernels take four state rows at a time so that each load of B and C serves four rows. Sums run
// in the level's lanes, so the last bits differ by level.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {

using SsmScanStepFn = void (*)(float* state, const float* x, const float* b, const float* c,
                               float dt, float a, float d, int64_t head_dim, int64_t state_size,
                               float* y);

SsmScanStepFn GetSsmScanStep(SimdLevel level);

namespace kernels {
void SsmScanStepPortable(float* state, const float* x, const float* b, const float* c, float dt,
                         float a, float d, int64_t head_dim, int64_t state_size, float* y);
// State sizes that are not a multiple of the lanes (16, 8) take the portable kernel.
void SsmScanStepAvx512(float* state, const float* x, const float* b, const float* c, float dt,
                       float a, float d, int64_t head_dim, int64_t state_size, float* y);
void SsmScanStepAvx2(float* state, const float* x, const float* b, const float* c, float dt,
                     float a, float d, int64_t head_dim, int64_t state_size, float* y);
}  // namespace kernels

}  // namespace moe
