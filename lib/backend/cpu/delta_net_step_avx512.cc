#include <immintrin.h>

#include "lib/backend/cpu/delta_net_step.h"

namespace moe::kernels {
namespace {

// R state rows at once: each load of k and q serves R rows, whose sums run side by side.
template <int R>
inline void Rows(float* s, const float* q, const float* k, const float* v, float decay, float beta,
                 int64_t size, float scale, float* y) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < size; i += 16) {
    const __m512 kk = _mm512_loadu_ps(k + i);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(s + r * size + i), kk, acc[r]);
  }
  __m512 delta[R];
  for (int r = 0; r < R; ++r) {
    delta[r] = _mm512_set1_ps((v[r] - _mm512_reduce_add_ps(acc[r]) * decay) * beta);
    acc[r] = _mm512_setzero_ps();
  }
  const __m512 d = _mm512_set1_ps(decay);
  for (int64_t i = 0; i < size; i += 16) {
    const __m512 kk = _mm512_loadu_ps(k + i), qq = _mm512_loadu_ps(q + i);
    for (int r = 0; r < R; ++r) {
      float* row = s + r * size + i;
      const __m512 x = _mm512_fmadd_ps(_mm512_loadu_ps(row), d, _mm512_mul_ps(kk, delta[r]));
      _mm512_storeu_ps(row, x);
      acc[r] = _mm512_fmadd_ps(x, qq, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]) * scale;
}

}  // namespace

void GatedDeltaStepAvx512(float* state, const float* q, const float* k, const float* v, float decay,
                          float beta, int64_t size, float scale, float* y) {
  if (size % 16 != 0) return GatedDeltaStepPortable(state, q, k, v, decay, beta, size, scale, y);
  int64_t j = 0;
  for (; j + 4 <= size; j += 4)
    Rows<4>(state + j * size, q, k, v + j, decay, beta, size, scale, y + j);
  for (; j < size; ++j) Rows<1>(state + j * size, q, k, v + j, decay, beta, size, scale, y + j);
}

}  // namespace moe::kernels
