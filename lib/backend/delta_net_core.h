// A gated delta net's recurrence (Qwen3.5's linear attention), one value head and one position
// at a time, as the CPU backend computes it (llama.cpp's ggml_gated_delta_net), written once as
// MOE_HOST_DEVICE functions for the CPU and a CUDA kernel to share (issue 21's one numeric core).
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/backend/ssm_core.h"
#include "lib/base/host_device.h"

namespace moe {

// out = x / max(|x|, eps), as ggml_l2_norm (the sum of squares in double).
MOE_HOST_DEVICE inline void DeltaNetL2Norm(const float* x, int64_t n, float eps, float* out) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float norm = sqrtf(static_cast<float>(sum));
  const float scale = 1.f / (norm > eps ? norm : eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
}

// A dot product in kSsmLanes interleaved partial sums, which the compiler keeps in one vector.
MOE_HOST_DEVICE inline float DeltaNetDot(const float* a, const float* b, int64_t n) {
  float part[kSsmLanes] = {};
  int64_t i = 0;
  for (; i + kSsmLanes <= n; i += kSsmLanes) {
    for (int q = 0; q < kSsmLanes; ++q) part[q] += a[i + q] * b[i + q];
  }
  float sum =
      ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// One value head's step: the state, stored transposed (row j holds S[., j], so each row is one
// value channel over the key's size), decays by `decay` = e^g; each value channel j moves
// towards v[j] along k by beta: S[., j] <- decay S[., j] + k beta (v[j] - decay S[., j] . k);
// y[j] = S[., j] . q x scale. q and k are L2-normalised already. Two passes over a row: its dot
// product with k (the decay applied to the sum), then the update with the dot product with q.
// The CPU's vector kernels (cpu/recurrent_steps.h) compute the same in their lanes.
MOE_HOST_DEVICE inline void GatedDeltaHeadStep(float* state, const float* q, const float* k,
                                               const float* v, float decay, float beta,
                                               int64_t size, float scale, float* y) {
  for (int64_t j = 0; j < size; ++j) {
    float* s = state + j * size;
    const float delta = (v[j] - DeltaNetDot(s, k, size) * decay) * beta;
    float part[kSsmLanes] = {};
    int64_t i = 0;
    for (; i + kSsmLanes <= size; i += kSsmLanes) {
      for (int l = 0; l < kSsmLanes; ++l) {
        const float x = s[i + l] * decay + k[i + l] * delta;
        s[i + l] = x;
        part[l] += x * q[i + l];
      }
    }
    float sum =
        ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (; i < size; ++i) {
      const float x = s[i] * decay + k[i] * delta;
      s[i] = x;
      sum += x * q[i];
    }
    y[j] = sum * scale;
  }
}

// sigmoid(x) and silu(x) = x sigmoid(x), the gates' functions.
MOE_HOST_DEVICE inline float GateSigmoid(float x) { return 1.f / (1.f + expf(-x)); }

}  // namespace moe
