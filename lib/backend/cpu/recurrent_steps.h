// The per-token state updates of the recurrent layers, one head and one position at a time, at
// each SIMD level: a gated delta net's step (delta_net_core.h's GatedDeltaHeadStep) and Mamba-2's
// scan step (ssm_core.h's SsmScanHeadStep). A prompt runs them once per token, head and layer
// over a state that stays in the core's cache while a thread walks one head through the tokens
// (64 KiB at Qwen3.5's 128 x 128); the vector kernels take four state rows at a time, so that
// each load of the vectors the rows share (k and q; B and C) serves four. Sums run in the
// level's lanes, so the last bits differ by level. The backend's own source is compiled for the
// baseline CPU, where these loops ran in SSE and took as long as a prompt's products.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {

using GatedDeltaStepFn = void (*)(float* state, const float* q, const float* k, const float* v,
                                  float decay, float beta, int64_t size, float scale, float* y);
using SsmScanStepFn = void (*)(float* state, const float* x, const float* b, const float* c,
                               float dt, float a, float d, int64_t head_dim, int64_t state_size,
                               float* y);

GatedDeltaStepFn GetGatedDeltaStep(SimdLevel level);
SsmScanStepFn GetSsmScanStep(SimdLevel level);

namespace kernels {
// Sizes (a delta net's head, a scan's state) that are not a multiple of the vector kernels'
// lanes (16, 8) take the portable kernels.
void GatedDeltaStepPortable(float* state, const float* q, const float* k, const float* v,
                            float decay, float beta, int64_t size, float scale, float* y);
void GatedDeltaStepAvx512(float* state, const float* q, const float* k, const float* v, float decay,
                          float beta, int64_t size, float scale, float* y);
void GatedDeltaStepAvx2(float* state, const float* q, const float* k, const float* v, float decay,
                        float beta, int64_t size, float scale, float* y);
void SsmScanStepPortable(float* state, const float* x, const float* b, const float* c, float dt,
                         float a, float d, int64_t head_dim, int64_t state_size, float* y);
void SsmScanStepAvx512(float* state, const float* x, const float* b, const float* c, float dt,
                       float a, float d, int64_t head_dim, int64_t state_size, float* y);
void SsmScanStepAvx2(float* state, const float* x, const float* b, const float* c, float dt,
                     float a, float d, int64_t head_dim, int64_t state_size, float* y);
}  // namespace kernels

}  // namespace moe
