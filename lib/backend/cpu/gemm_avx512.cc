// AVX-512 F32 GEMM: 4 weight rows x 4 tokens per tile, 16 floats per step (this file is compiled
// with AVX-512 enabled and only called when the CPU has it).
#include <immintrin.h>

#include "lib/backend/cpu/gemm.h"

namespace moe::kernels {
namespace {

// Full tile: cols a multiple of 16.
template <int R, int T>
void Tile(const float* w, const float* x, int64_t cols, float* y, int64_t ldy) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < cols; c += 16) {
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x + t * cols + c);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = _mm512_loadu_ps(w + r * cols + c);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

template <int R>
void RowBlock(const float* w, const float* x, int64_t n, int64_t cols, float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) Tile<R, 4>(w, x + t * cols, cols, y + t * ldy, ldy);
  for (; t < n; ++t) Tile<R, 1>(w, x + t * cols, cols, y + t * ldy, ldy);
}

}  // namespace

void GemmAvx512(const float* w, int64_t rows, const float* x, int64_t n, int64_t cols, float* y,
                int64_t ldy) {
  if (cols % 16 != 0) {
    GemmScalar(w, rows, x, n, cols, y, ldy);
    return;
  }
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) RowBlock<4>(w + r * cols, x, n, cols, y + r, ldy);
  for (; r < rows; ++r) RowBlock<1>(w + r * cols, x, n, cols, y + r, ldy);
}

}  // namespace moe::kernels
