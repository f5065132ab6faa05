#include <immintrin.h>

#include "lib/backend/cpu/exp_avx512.h"
#include "lib/backend/cpu/exp_sum.h"

namespace moe::kernels {

double ExpSumAvx512(const float* x, int64_t n, float max, float inv_temperature, float ceiling) {
  const __m512 m = _mm512_set1_ps(max), s = _mm512_set1_ps(inv_temperature);
  const __m512 c = _mm512_set1_ps(ceiling);
  // Each 16 terms in float, then into two double accumulators of 8.
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(in, x + i);
    const __mmask16 below = _mm512_mask_cmp_ps_mask(in, v, c, _CMP_LE_OQ);  // NaN: false
    const __m512 e = _mm512_maskz_mov_ps(below, ExpAvx512(_mm512_mul_ps(_mm512_sub_ps(v, m), s)));
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(
        hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

}  // namespace moe::kernels
