#include <immintrin.h>

#include <cmath>

#include "lib/backend/cpu/ssm_scan_step.h"

namespace moe::kernels {
namespace {

// R state rows at once: each load of B and C serves R rows, whose sums run side by side.
template <int R>
inline void Rows(float* s, const float* x, const float* b, const float* c, float dt, float decay,
                 float d, int64_t state_size, float* y) {
  __m512 acc[R], xdt[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    xdt[r] = _mm512_set1_ps(x[r] * dt);
  }
  const __m512 dv = _mm512_set1_ps(decay);
  for (int64_t j = 0; j < state_size; j += 16) {
    const __m512 bb = _mm512_loadu_ps(b + j), cc = _mm512_loadu_ps(c + j);
    for (int r = 0; r < R; ++r) {
      float* row = s + r * state_size + j;
      const __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(row), dv, _mm512_mul_ps(bb, xdt[r]));
      _mm512_storeu_ps(row, v);
      acc[r] = _mm512_fmadd_ps(v, cc, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]) + x[r] * d;
}

}  // namespace

void SsmScanStepAvx512(float* state, const float* x, const float* b, const float* c, float dt,
                       float a, float d, int64_t head_dim, int64_t state_size, float* y) {
  if (state_size % 16 != 0) {
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
