#include <immintrin.h>

#include "lib/backend/cpu/half_rows.h"

namespace moe::kernels {

void ToHalvesF16c(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  if (i < n) ToHalvesPortable(x + i, n - i, out + i);
}

}  // namespace moe::kernels
