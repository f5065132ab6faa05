#include <immintrin.h>

#include "lib/backend/cpu/exp_avx512.h"
#include "lib/backend/cpu/silu_mul.h"

namespace moe::kernels {

void SiluMulAvx512(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = ExpAvx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = ExpAvx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

namespace {
// SwigluClampedElement in 16 lanes: minps/maxps return their second operand when either is NaN,
// so a NaN passes through as the element's comparisons let it.
inline __m512 SwigluClamped16(__m512 gate, __m512 up) {
  const __m512 limit = _mm512_set1_ps(7.f);
  const __m512 g = _mm512_min_ps(limit, gate);
  const __m512 u = _mm512_max_ps(_mm512_set1_ps(-7.f), _mm512_min_ps(limit, up));
  const __m512 e =
      ExpAvx512(_mm512_mul_ps(_mm512_set1_ps(1.702f), _mm512_sub_ps(_mm512_setzero_ps(), g)));
  const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  return _mm512_mul_ps(s, _mm512_add_ps(u, _mm512_set1_ps(1.0f)));
}
}  // namespace

void SwigluClampedAvx512(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, SwigluClamped16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(
        out + i, m,
        SwigluClamped16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace moe::kernels
