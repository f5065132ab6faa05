#include <immintrin.h>

#include <cmath>

#include "lib/backend/cpu/ssm_scan_step.h"

namespace moe::kernels {
namespace {

inline float ReduceAdd8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// R state rows at once: each load of B and C serves R rows, whose sums run side by side.
template <int R>
inline void Rows(float* s, const float* x, const float* b, const float* c, float dt, float decay,
                 float d, int64_t state_size, float* y) {
  __m256 acc[R], xdt[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    xdt[r] = _mm256_set1_ps(x[r] * dt);
  }
  const __m256 dv = _mm256_set1_ps(decay);
  for (int64_t j = 0; j < state_size; j += 8) {
    const __m256 bb = _mm256_loadu_ps(b + j), cc = _mm256_loadu_ps(c + j);
    for (int r = 0; r < R; ++r) {
      float* row = s + r * state_size + j;
      const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(row), dv, _mm256_mul_ps(bb, xdt[r]));
      _mm256_storeu_ps(row, v);
      acc[r] = _mm256_fmadd_ps(v, cc, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = ReduceAdd8(acc[r]) + x[r] * d;
}

}  // namespace

void SsmScanStepAvx2(float* state, const float* x, const float* b, const float* c, float dt,
                     float a, float d, int64_t head_dim, int64_t state_size, float* y) {
  if (state_size % 8 != 0) {
    return SsmScanStepPortable(state, x, b, c, dt, a, d, head_dim, state_size, y);
  }
  const float decay = std::exp(dt * a);
  int64_t i = 0;
  for (; i + 4 <= head_dim; i += 4) {
    Rows<4>(state + i * state_size, x + i, b, c, dt, decay, d, state_size, y + i);
  }
  for (; i < head_dim; ++i)
    Rows<1>(state + i * state_size, x + i, b, c, dt, decay, d, state_size, y + i);
}

}  // namespace moe::kernels
