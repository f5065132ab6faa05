#include <immintrin.h>

#include "lib/backend/cpu/silu_mul.h"

namespace moe::kernels {
namespace {

// e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2: e^r by its Taylor series to r^7
// (truncation below 2^-26), then vscalefps multiplies by 2^n, overflowing to inf and
// underflowing to 0 as the exact result would. ln 2 is split in two so r keeps its low bits.
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // NaN stays NaN (MAXPS returns operand 2)
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.4286068203094172e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

void SiluMulAvx512(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace moe::kernels
