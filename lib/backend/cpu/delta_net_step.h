// One value head's step of a gated delta net (delta_net_core.h's GatedDeltaHeadStep) at each
// SIMD level: a prompt runs it once per token, head and layer over a state of size^2 floats
// (64 KiB at Qwen3.5's 128), which stays in the core's cache while a thread walks one head
// through the tokens; the vector kernels take four state rows at a time so that each load of k
// and q serves four rows. Sums run in the level's lanes, so the last bits differ by level.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {

using GatedDeltaStepFn = void (*)(float* state, const float* q, const float* k, const float* v,
                                  float decay, float beta, int64_t size, float scale, float* y);

GatedDeltaStepFn GetGatedDeltaStep(SimdLevel level);

namespace kernels {
void GatedDeltaStepPortable(float* state, const float* q, const float* k, const float* v,
                            float decay, float beta, int64_t size, float scale, float* y);
// Sizes that are not a multiple of the lanes (16, 8) take the portable kernel.
void GatedDeltaStepAvx512(float* state, const float* q, const float* k, const float* v, float decay,
                          float beta, int64_t size, float scale, float* y);
void GatedDeltaStepAvx2(float* state, const float* q, const float* k, const float* v, float decay,
                        float beta, int64_t size, float scale, float* y);
}  // namespace kernels

}  // namespace moe
