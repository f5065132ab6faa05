// Dot products of one weight row with one token's activations, per weight type and SIMD level.
// Quantized weights meet Q8 activations (integer products, one float scale per block); float
// weights (F32/F16/BF16) meet float activations.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/q8_activations.h"
#include "lib/base/dtype.h"

namespace moe {

// n elements (a whole number of weight blocks); x holds n / 32 blocks.
using QuantDotFn = float (*)(const uint8_t* w, const Q8Block* x, int64_t n);
using FloatDotFn = float (*)(const uint8_t* w, const float* x, int64_t n);

// The activations' block scales and quant sums also as plain float arrays, so AVX-512 kernels
// load them 16 at a time: d[b], sum[b] (of block b's 32 quants), sum16[2b + h] (of half h).
struct Q8Aux {
  const float* d;
  const float* sum;
  const float* sum16;
};
using SplitQuantDotFn = float (*)(const uint8_t* w, const Q8Block* x, const Q8Aux& aux, int64_t n);

// Fills the arrays of a Q8Aux for `count` blocks: d[count], sum[count], sum16[2 count].
void FillQ8Aux(const Q8Block* blocks, int64_t count, float* d, float* sum, float* sum16);

bool IsQuantized(DType t);
// nullptr when (t, level) has no split kernel; use GetQuantDot then.
SplitQuantDotFn GetSplitQuantDot(DType t, SimdLevel level);
QuantDotFn GetQuantDot(DType t, SimdLevel level);  // t quantized
FloatDotFn GetFloatDot(DType t, SimdLevel level);  // t is F32, F16 or BF16

// The per-level tables (dot_scalar.cc, dot_avx2.cc, dot_avx512.cc).
namespace kernels {
QuantDotFn ScalarQuantDot(DType t);
FloatDotFn ScalarFloatDot(DType t);
QuantDotFn Avx2QuantDot(DType t);
FloatDotFn Avx2FloatDot(DType t);
QuantDotFn Avx512VnniQuantDot(DType t);
SplitQuantDotFn Avx512VnniSplitQuantDot(DType t);
}  // namespace kernels

}  // namespace moe
