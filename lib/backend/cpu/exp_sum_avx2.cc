#include <immintrin.h>

#include "lib/backend/cpu/exp_avx2.h"
#include "lib/backend/cpu/exp_sum.h"

namespace moe::kernels {

double ExpSumAvx2(const float* x, int64_t n, float max, float inv_temperature, float ceiling) {
  const __m256 m = _mm256_set1_ps(max), s = _mm256_set1_ps(inv_temperature);
  const __m256 c = _mm256_set1_ps(ceiling);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 below = _mm256_cmp_ps(v, c, _CMP_LE_OQ);  // NaN: false
    const __m256 e = _mm256_and_ps(below, ExpAvx2(_mm256_mul_ps(_mm256_sub_ps(v, m), s)));
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double parts[4];
  _mm256_store_pd(parts, _mm256_add_pd(lo, hi));
  return parts[0] + parts[1] + parts[2] + parts[3] +
         ExpSumPortable(x + i, n - i, max, inv_temperature, ceiling);
}

}  // namespace moe::kernels
