// Mamba-2's mixer, element by element, as the CPU backend computes it (llama.cpp's ggml_ssm_conv
// and ggml_ssm_scan order of sums), written once as MOE_HOST_DEVICE functions for the CPU and a
// CUDA kernel to share (issue 21's one numeric core).
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/base/host_device.h"

namespace moe {

// ggml's softplus: log(1 + e^x), and x itself past 20 (where the two agree in float).
MOE_HOST_DEVICE inline float SsmSoftplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// silu(bias + sum_k kernel[k] * in(k)), k oldest first, in(k) the channel's input k positions
// after the window's start (0 before position 0).
template <typename In>
MOE_HOST_DEVICE inline float SsmConvChannel(const float* kernel, float bias, int64_t kernel_len,
                                            In in) {
  float sum = 0.f;
  for (int64_t k = 0; k < kernel_len; ++k) sum += kernel[k] * in(k);
  const float v = sum + bias;
  return v / (1.f + expf(-v));
}

inline constexpr int kSsmLanes = 8;

// One head's step at one position: the state [head_dim x state_size] decays by e^(dt A) and takes
// x dt B; y[i] = C . state row i + D x[i]. dt is softplus(dt + dt_bias), already applied. The
// dot product is summed in 8 interleaved partial sums (as ggml sums it in SIMD lanes), which
// lets the compiler keep them in one vector register.
MOE_HOST_DEVICE inline void SsmScanHeadStep(float* state, const float* x, const float* b,
                                            const float* c, float dt, float a, float d,
                                            int64_t head_dim, int64_t state_size, float* y) {
  const float decay = expf(dt * a);
  for (int64_t i = 0; i < head_dim; ++i) {
    float* s = state + i * state_size;
    const float x_dt = x[i] * dt;
    float part[kSsmLanes] = {};
    int64_t j = 0;
    for (; j + kSsmLanes <= state_size; j += kSsmLanes) {
      for (int q = 0; q < kSsmLanes; ++q) {
        const float v = s[j + q] * decay + b[j + q] * x_dt;
        s[j + q] = v;
        part[q] += v * c[j + q];
      }
    }
    float sum =
        ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (; j < state_size; ++j) {
      const float v = s[j] * decay + b[j] * x_dt;
      s[j] = v;
      sum += v * c[j];
    }
    y[i] = sum + x[i] * d;
  }
}

}  // namespace moe
