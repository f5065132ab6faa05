#include <immintrin.h>

#include "lib/backend/cpu/exp_avx512.h"
#include "lib/backend/cpu/silu_mul.h"

namespace moe::kernels {
namespace {

// out = f(gate, up) 16 lanes at a time, the tail masked.
template <typename F>
inline void Gated16(const float* gate, const float* up, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m,
                          f(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

inline __m512 SiluMul16(__m512 g, __m512 up) {
  const __m512 e = ExpAvx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
  const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  return _mm512_mul_ps(s, up);
}

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

void SiluMulAvx512(const float* gate, const float* up, float* out, int64_t n) {
  Gated16(gate, up, out, n, SiluMul16);
}

void SwigluClampedAvx512(const float* gate, const float* up, float* out, int64_t n) {
  Gated16(gate, up, out, n, SwigluClamped16);
}

}  // namespace moe::kernels
