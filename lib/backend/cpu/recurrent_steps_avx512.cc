#include <immintrin.h>

#include "lib/backend/cpu/recurrent_step_rows.h"

namespace moe::kernels {
namespace {

struct Avx512Lanes {
  using V = __m512;
  static constexpr int kCount = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
};

}  // namespace

void GatedDeltaStepAvx512(float* state, const float* q, const float* k, const float* v, float decay,
                          float beta, int64_t size, float scale, float* y) {
  recurrent::GatedDeltaStep<Avx512Lanes>(state, q, k, v, decay, beta, size, scale, y);
}

void SsmScanStepAvx512(float* state, const float* x, const float* b, const float* c, float dt,
                       float a, float d, int64_t head_dim, int64_t state_size, float* y) {
  recurrent::SsmScanStep<Avx512Lanes>(state, x, b, c, dt, a, d, head_dim, state_size, y);
}

}  // namespace moe::kernels
