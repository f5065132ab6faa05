// RMSNorm of one row as the CPU backend computes it (ggml's order: the sum of squares in double,
// in 8 interleaved partial sums), written once as MOE_HOST_DEVICE functions for the CPU and the
// CUDA kernel (kernels/rms_norm.cu; issue 21's one numeric core). The kernel sums the 8 lanes in
// 8 threads (RmsNormLaneSum), which gives the CPU's partial sums exactly.
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/base/host_device.h"

namespace moe {

inline constexpr int kRmsNormLanes = 8;

// Lane j's partial sum: x[i + j]^2 over i = 0, 8, ... while i + 8 <= dim, in double.
MOE_HOST_DEVICE inline double RmsNormLaneSum(const float* x, int64_t dim, int j) {
  double p = 0;
  for (int64_t i = 0; i + kRmsNormLanes <= dim; i += kRmsNormLanes) {
    p += static_cast<double>(x[i + j]) * x[i + j];
  }
  return p;
}

// 1 / sqrt(mean(x^2) + eps) from the lanes' partial sums and the tail past the last whole 8.
MOE_HOST_DEVICE inline float RmsNormInverse(const double part[kRmsNormLanes], const float* x,
                                            int64_t dim, float eps) {
  double ss =
      ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  for (int64_t i = dim / kRmsNormLanes * kRmsNormLanes; i < dim; ++i) {
    ss += static_cast<double>(x[i]) * x[i];
  }
  return 1.0f / sqrtf(static_cast<float>(ss / dim) + eps);
}

// y = x * inverse * weight, element i (weight 1 for an unweighted norm: x * inverse exactly).
MOE_HOST_DEVICE inline float RmsNormElement(float x, float inverse, float weight) {
  return x * inverse * weight;
}

// The whole row on one thread (the CPU's; the lanes interleaved so they overlap).
MOE_HOST_DEVICE inline void RmsNormRow(const float* x, const float* weight, int64_t dim, float eps,
                                       float* y) {
  double part[kRmsNormLanes] = {};
  for (int64_t i = 0; i + kRmsNormLanes <= dim; i += kRmsNormLanes) {
    for (int j = 0; j < kRmsNormLanes; ++j) part[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  const float inverse = RmsNormInverse(part, x, dim, eps);
  for (int64_t i = 0; i < dim; ++i) {
    y[i] = RmsNormElement(x[i], inverse, weight != nullptr ? weight[i] : 1.f);
  }
}

}  // namespace moe
