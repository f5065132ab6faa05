#include <immintrin.h>

#include "lib/backend/cpu/recurrent_step_rows.h"

namespace moe::kernels {
namespace {

struct Avx2Lanes {
  using V = __m256;
  static constexpr int kCount = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float Sum(V v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
  }
};

}  // namespace

void GatedDeltaStepAvx2(float* state, const float* q, const float* k, const float* v, float decay,
                        float beta, int64_t size, float scale, float* y) {
  recurrent::GatedDeltaStep<Avx2Lanes>(state, q, k, v, decay, beta, size, scale, y);
}

void SsmScanStepAvx2(float* state, const float* x, const float* b, const float* c, float dt,
                     float a, float d, int64_t head_dim, int64_t state_size, float* y) {
  recurrent::SsmScanStep<Avx2Lanes>(state, x, b, c, dt, a, d, head_dim, state_size, y);
}

}  // namespace moe::kernels
