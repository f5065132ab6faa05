#include "lib/sampling/logit_search.h"

#include <immintrin.h>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {
namespace {

int64_t FirstAbovePortable(const float* x, int64_t from, int64_t n, float t) {
  for (int64_t i = from; i < n; ++i) {
    if (x[i] > t) return i;
  }
  return n;
}

// _CMP_GT_OQ: ordered, so a NaN lane compares false, as x[i] > t does.
__attribute__((target("avx512f"))) int64_t FirstAboveAvx512(const float* x, int64_t from, int64_t n,
                                                            float t) {
  const __m512 tv = _mm512_set1_ps(t);
  int64_t i = from;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), tv, _CMP_GT_OQ);
    if (m != 0) return i + __builtin_ctz(m);
  }
  return FirstAbovePortable(x, i, n, t);
}

__attribute__((target("avx2"))) int64_t FirstAboveAvx2(const float* x, int64_t from, int64_t n,
                                                       float t) {
  const __m256 tv = _mm256_set1_ps(t);
  int64_t i = from;
  for (; i + 8 <= n; i += 8) {
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), tv, _CMP_GT_OQ));
    if (m != 0) return i + __builtin_ctz(m);
  }
  return FirstAbovePortable(x, i, n, t);
}

}  // namespace

int64_t FirstAbove(const float* x, int64_t from, int64_t n, float t) {
  const SimdLevel level = ActiveSimdLevel();
  if (level >= SimdLevel::kAvx512) return FirstAboveAvx512(x, from, n, t);
  if (level >= SimdLevel::kAvx2) return FirstAboveAvx2(x, from, n, t);
  return FirstAbovePortable(x, from, n, t);
}

}  // namespace moe
