#include <immintrin.h>

#include "lib/backend/cpu/delta_net_step.h"

namespace moe::kernels {
namespace {

inline float ReduceAdd8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// R state rows at once: each load of k and q serves R rows, whose sums run side by side.
template <int R>
inline void Rows(float* s, const float* q, const float* k, const float* v, float decay, float beta,
                 int64_t size, float scale, float* y) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < size; i += 8) {
    const __m256 kk = _mm256_loadu_ps(k + i);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(s + r * size + i), kk, acc[r]);
  }
  __m256 delta[R];
  for (int r = 0; r < R; ++r) {
    delta[r] = _mm256_set1_ps((v[r] - ReduceAdd8(acc[r]) * decay) * beta);
    acc[r] = _mm256_setzero_ps();
  }
  const __m256 d = _mm256_set1_ps(decay);
  for (int64_t i = 0; i < size; i += 8) {
    const __m256 kk = _mm256_loadu_ps(k + i), qq = _mm256_loadu_ps(q + i);
    for (int r = 0; r < R; ++r) {
      float* row = s + r * size + i;
      const __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(row), d, _mm256_mul_ps(kk, delta[r]));
      _mm256_storeu_ps(row, x);
      acc[r] = _mm256_fmadd_ps(x, qq, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = ReduceAdd8(acc[r]) * scale;
}

}  // namespace

void GatedDeltaStepAvx2(float* state, const float* q, const float* k, const float* v, float decay,
                        float beta, int64_t size, float scale, float* y) {
  if (size % 8 != 0) return GatedDeltaStepPortable(state, q, k, v, decay, beta, size, scale, y);
  int64_t j = 0;
  for (; j + 4 <= size; j += 4)
    Rows<4>(state + j * size, q, k, v + j, decay, beta, size, scale, y + j);
  for (; j < size; ++j) Rows<1>(state + j * size, q, k, v + j, decay, beta, size, scale, y + j);
}

}  // namespace moe::kernels
