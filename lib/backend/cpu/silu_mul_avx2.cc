#include <immintrin.h>

#include "lib/backend/cpu/exp_avx2.h"
#include "lib/backend/cpu/silu_mul.h"

namespace moe::kernels {

void SiluMulAvx2(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = ExpAvx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  if (i < n) SiluMulPortable(gate + i, up + i, out + i, n - i);
}

}  // namespace moe::kernels
