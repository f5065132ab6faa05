// F32 GEMM micro-kernels for prompt processing: a block of dequantized weight rows against many
// token rows, 4 x 4 register tiles so every weight and activation load feeds four FMAs.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {

// y[t * ldy + r] = sum_c w[r * cols + c] * x[t * cols + c] for r < rows, t < n.
using GemmFn = void (*)(const float* w, int64_t rows, const float* x, int64_t n, int64_t cols,
                        float* y, int64_t ldy);

// The kernel for a level (the portable one below AVX-512).
GemmFn GetGemm(SimdLevel level);

namespace kernels {
void GemmScalar(const float* w, int64_t rows, const float* x, int64_t n, int64_t cols, float* y,
                int64_t ldy);
void GemmAvx512(const float* w, int64_t rows, const float* x, int64_t n, int64_t cols, float* y,
                int64_t ldy);
}  // namespace kernels

}  // namespace moe
