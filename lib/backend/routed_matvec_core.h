// One row of a routed expert's matrix times one input row, shared out among `lanes` lanes: the
// arithmetic of the CUDA kernel that runs a step's routed experts by the ids the router left in
// device memory (kernels/routed_experts.cu), written once as a MOE_HOST_DEVICE function so that
// the CPU tests check its decomposition against the CPU backend (issue 21's one numeric core).
#pragma once

#include <cstdint>

#include "lib/backend/block_dot.h"
#include "lib/base/dtype_enum.h"
#include "lib/base/host_device.h"

namespace moe {

// An expert matrix as the device kernels see it: rows of `dtype` (F32 or a quantized file type,
// as stored), an optional bias per row.
struct RoutedMatrix {
  const uint8_t* data = nullptr;
  const float* bias = nullptr;
  DType dtype = DType::kF32;
};

// An expert's three matrices, by RoutedMatrixIndex.
enum RoutedMatrixIndex { kRoutedGate = 0, kRoutedUp = 1, kRoutedDown = 2 };
struct RoutedExpert {
  RoutedMatrix m[3];
};

// Whether a matrix of this type takes 8-bit activations with one scale per 8 blocks (the
// K-quants, as the CPU quantizes for them), else one per block; F32 rows take the floats.
MOE_HOST_DEVICE inline bool TakesSuperBlockScales(DType t) {
  return QuantBlockShape(t).elems == 256;
}

// Lane `lane` of `lanes`' part of row r of m ([rows x cols]) times the input: F32 rows against
// xf, quantized rows against its 8-bit blocks (x8 for TakesSuperBlockScales types, x1 for the
// others). Lane l takes blocks (or, for F32, values) l, l + lanes, ...
MOE_HOST_DEVICE inline float RoutedRowPart(const RoutedMatrix& m, int64_t r, int64_t cols,
                                           const float* xf, const Q8Block* x1, const Q8Block* x8,
                                           int lane, int lanes) {
  float sum = 0.f;
  if (m.dtype == DType::kF32) {
    const float* row = reinterpret_cast<const float*>(m.data) + r * cols;
    for (int64_t i = lane; i < cols; i += lanes) sum += row[i] * xf[i];
    return sum;
  }
  const BlockShape s = QuantBlockShape(m.dtype);
  const int64_t blocks = cols / s.elems, per = s.elems / 32;
  const uint8_t* row = m.data + r * blocks * s.bytes;
  const Q8Block* x = s.elems == 256 ? x8 : x1;
  for (int64_t b = lane; b < blocks; b += lanes) {
    float part = 0.f;
    QuantDotRow(m.dtype, row + b * s.bytes, x + b * per, s.elems, &part);
    sum += part;
  }
  return sum;
}

// Lanes per row for inputs of `cols` values: the fewest blocks a row of that length has (of 256
// values when it can hold them), rounded up to a power of two, at most a warp.
MOE_HOST_DEVICE inline int RoutedLanes(int64_t cols) {
  const int64_t blocks = cols % 256 == 0 ? cols / 256 : cols / 32;
  int lanes = 1;
  while (lanes < 32 && lanes < blocks) lanes *= 2;
  return lanes;
}

// The sum of the lanes' parts in the order a warp's xor shuffles add them (lane 0's result).
MOE_HOST_DEVICE inline float ShuffleSum(const float* parts, int lanes) {
  float v[32];
  for (int l = 0; l < lanes; ++l) v[l] = parts[l];
  for (int o = lanes / 2; o > 0; o /= 2) {
    float next[32];
    for (int l = 0; l < lanes; ++l) next[l] = v[l] + v[l ^ o];
    for (int l = 0; l < lanes; ++l) v[l] = next[l];
  }
  return v[0];
}

}  // namespace moe
