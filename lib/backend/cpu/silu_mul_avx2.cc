#include <immintrin.h>

#include <algorithm>

#include "lib/backend/cpu/exp_avx2.h"
#include "lib/backend/cpu/silu_mul.h"

namespace moe::kernels {

namespace {

// out = f(gate, up) 8 lanes at a time. The tail goes through the same vector arithmetic
// (masked), so an element's result does not depend on where a thread's share of the rows
// happens to end.
template <typename F>
inline void Gated8(const float* gate, const float* up, float* out, int64_t n, F f) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t i = 0; i < n; i += 8) {
    const int left = static_cast<int>(std::min<int64_t>(8, n - i));
    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
    _mm256_maskstore_ps(out + i, k,
                        f(_mm256_maskload_ps(gate + i, k), _mm256_maskload_ps(up + i, k)));
  }
}

inline __m256 SiluMul8(__m256 g, __m256 up) {
  const __m256 e = ExpAvx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
  const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  return _mm256_mul_ps(s, up);
}

// SwigluClampedElement in 8 lanes (minps/maxps pass a NaN through as the element does).
inline __m256 SwigluClamped8(__m256 gate, __m256 up) {
  const __m256 limit = _mm256_set1_ps(7.f), one = _mm256_set1_ps(1.0f);
  const __m256 g = _mm256_min_ps(limit, gate);
  const __m256 u = _mm256_max_ps(_mm256_set1_ps(-7.f), _mm256_min_ps(limit, up));
  const __m256 e =
      ExpAvx2(_mm256_mul_ps(_mm256_set1_ps(1.702f), _mm256_sub_ps(_mm256_setzero_ps(), g)));
  const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
  return _mm256_mul_ps(s, _mm256_add_ps(u, one));
}

}  // namespace

void SiluMulAvx2(const float* gate, const float* up, float* out, int64_t n) {
  Gated8(gate, up, out, n, SiluMul8);
}

void SwigluClampedAvx2(const float* gate, const float* up, float* out, int64_t n) {
  Gated8(gate, up, out, n, SwigluClamped8);
}

}  // namespace moe::kernels
