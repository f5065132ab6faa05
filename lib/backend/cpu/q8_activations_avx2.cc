// AVX2 activation quantization: the operations of the portable QuantizeActivations (max |x|
// ignoring NaN, the same IEEE multiply, round-to-nearest-even, non-finite -> 0) 8 lanes at a
// time, so the blocks are bit-identical to it.
#include <immintrin.h>

#include "lib/backend/cpu/q8_activations.h"

namespace moe::kernels {
namespace {

inline int SumLanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

inline float MaxLanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

}  // namespace

void QuantizeActivationsAvx2(const float* x, int64_t n, Q8Block* out, int64_t span) {
  const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(__builtin_inff());
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  float id = 0, d = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    if (b % span == 0) {  // the scale shared by blocks b..b + span
      // MAXPS returns its second operand when either is NaN: NaN lanes keep the running max.
      __m256 m = _mm256_setzero_ps();
      for (int64_t i = 0; i < 32 * span; i += 8)
        m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 32 * b + i)), m);
      const float amax = MaxLanes(m);
      id = amax != 0 ? 127.0f / amax : 0.0f;
      d = span == 1 ? _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT))  // FloatToHalf
                    : amax / 127.0f;
    }
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
    Q8Block& o = out[b];
    o.d = d;
    const __m256 scale = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], scale),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256 finite = _mm256_cmp_ps(_mm256_andnot_ps(sign, r), inf, _CMP_LT_OQ);
      r = _mm256_min_ps(_mm256_max_ps(_mm256_and_ps(finite, r), lo), hi);
      q[i] = _mm256_cvtps_epi32(r);
    }
    // int32 -> int8 in order: the packs interleave 128-bit lanes, the permute puts them back.
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q), bytes);
    const int s0 = SumLanes(_mm256_add_epi32(q[0], q[1]));
    const int s1 = SumLanes(_mm256_add_epi32(q[2], q[3]));
    o.sum[0] = static_cast<int16_t>(s0);
    o.sum[1] = static_cast<int16_t>(s1);
    o.dsum = o.d * static_cast<float>(s0 + s1);
  }
}

}  // namespace moe::kernels
