// Rotary position encoding as the CPU backend and the CUDA kernel (kernels/rope.cu) both compute
// it: the parameters, each pair's frequency and YaRN share, a token's angle and the rotation of
// one pair, written once as MOE_HOST_DEVICE functions (issue 21's one numeric core). The CPU's
// llama.cpp-exact results are what the GPU then reproduces, up to its cosf/sinf.
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/base/host_device.h"

namespace moe {

enum class RopeLayout { kNorm, kNeox };  // rotate (2i, 2i+1) or (i, i + dim/2)

// Rotary position encoding of n_rot dimensions of each head from `offset` (the others pass
// through): pair i turns by position x freq_base^(-2i / n_rot). With YaRN (factor > 1) the
// pairs below the correction range keep that angle, those above it take angle / factor, and
// those within blend the two linearly (llama.cpp's rope_yarn, ext_factor 1).
struct RopeParams {
  RopeLayout layout = RopeLayout::kNorm;
  int64_t n_rot = 0;
  int64_t offset = 0;
  float freq_base = 10000.f;
  float yarn_factor = 1.f;
  int64_t yarn_orig_ctx = 0;
  float yarn_beta_fast = 32.f;
  float yarn_beta_slow = 1.f;
  float magnitude = 1.f;  // cos and sin are multiplied by it
  // n_rot / 2 divisors of the pairs' frequencies (llama.cpp's rope_freqs: Llama 3's long-context
  // RoPE); null: none. On a device backend, device memory.
  const float* freq_factors = nullptr;
};

MOE_HOST_DEVICE inline bool RopeUsesYarn(const RopeParams& r) { return r.yarn_factor > 1.f; }

// YaRN's correction range, in pairs (llama.cpp's rope_yarn_corr_dims): a pair's share of the
// unscaled angle ramps from 1 below lo to 0 above hi.
struct RopeCorrection {
  float lo = 0, hi = 0;
};

MOE_HOST_DEVICE inline float RopeCorrectionDim(const RopeParams& r, float beta) {
  return r.n_rot * logf(r.yarn_orig_ctx / (beta * 2 * 3.14159265358979323846f)) /
         (2 * logf(r.freq_base));
}

MOE_HOST_DEVICE inline RopeCorrection RopeCorrectionOf(const RopeParams& r) {
  RopeCorrection c;
  if (!RopeUsesYarn(r)) return c;
  c.lo = fmaxf(0.f, floorf(RopeCorrectionDim(r, r.yarn_beta_fast)));
  c.hi = fminf(static_cast<float>(r.n_rot - 1), ceilf(RopeCorrectionDim(r, r.yarn_beta_slow)));
  return c;
}

// Pair i's frequency: freq_base^(-2i / n_rot), divided by its factor when there are factors.
MOE_HOST_DEVICE inline float RopePairFrequency(const RopeParams& r, int64_t i) {
  const float f = powf(r.freq_base, -2.0f * i / r.n_rot);
  return r.freq_factors != nullptr ? f / r.freq_factors[i] : f;
}

// Pair i's share of the unscaled angle (1 without YaRN).
MOE_HOST_DEVICE inline float RopePairRamp(const RopeParams& r, const RopeCorrection& c, int64_t i) {
  if (!RopeUsesYarn(r)) return 1.f;
  return 1 - fminf(1.f, fmaxf(0.f, (i - c.lo) / fmaxf(0.001f, c.hi - c.lo)));
}

// The angle of a pair of frequency `freq` and YaRN share `ramp` at `position`.
MOE_HOST_DEVICE inline float RopeAngle(const RopeParams& r, int32_t position, float freq,
                                       float ramp) {
  float theta = position * freq;
  if (RopeUsesYarn(r)) {
    const float freq_scale = 1.f / r.yarn_factor;
    theta = freq_scale * theta * (1 - ramp) + theta * ramp;
  }
  return theta;
}

// The two elements pair i of a head's rotated part turns (v points at the part: head + offset).
MOE_HOST_DEVICE inline void RopePairIndex(const RopeParams& r, int64_t i, int64_t* a, int64_t* b) {
  *a = r.layout == RopeLayout::kNorm ? 2 * i : i;
  *b = r.layout == RopeLayout::kNorm ? 2 * i + 1 : i + r.n_rot / 2;
}

// Turns (v[a], v[b]) by the angle whose cosine and sine (times the magnitude) are c and s.
MOE_HOST_DEVICE inline void RopeRotate(float* v, int64_t a, int64_t b, float c, float s) {
  const float x0 = v[a], x1 = v[b];
  v[a] = x0 * c - x1 * s;
  v[b] = x0 * s + x1 * c;
}

}  // namespace moe
