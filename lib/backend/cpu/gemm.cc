#include "lib/backend/cpu/gemm.h"

namespace moe {
namespace kernels {

void GemmScalar(const float* w, int64_t rows, const float* x, int64_t n, int64_t cols, float* y,
                int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < n; ++t) {
      float s = 0;
      for (int64_t c = 0; c < cols; ++c) s += w[r * cols + c] * x[t * cols + c];
      y[t * ldy + r] = s;
    }
  }
}

}  // namespace kernels

GemmFn GetGemm(SimdLevel level) {
  return level >= SimdLevel::kAvx512 ? kernels::GemmAvx512 : kernels::GemmScalar;
}

}  // namespace moe
