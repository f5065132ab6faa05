// A vector e^x for the AVX-512 kernels (SiLU, softmax); include only from files compiled
// with AVX-512F.
#pragma once

#include <immintrin.h>

#include "lib/backend/cpu/exp_poly.h"

namespace moe::kernels {

// e^x (exp_poly.h), then vscalefps multiplies by 2^n, overflowing to inf and underflowing to 0
// as the exact result would.
inline __m512 ExpAvx512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // NaN stays NaN (MAXPS returns operand 2)
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpTaylor[i]));
  return _mm512_scalef_ps(p, n);
}

}  // namespace moe::kernels
