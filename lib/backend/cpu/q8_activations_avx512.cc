// AVX-512 activation quantization: the same operations as the portable QuantizeActivations
// (max |x| ignoring NaN, the same IEEE multiply, round-to-nearest-even, non-finite -> 0), so the
// blocks are bit-identical to it — only 32 lanes at a time.
#include <immintrin.h>

#include "lib/backend/cpu/q8_activations.h"

namespace moe::kernels {

void QuantizeActivationsAvx512(const float* x, int64_t n, Q8Block* out, int64_t span) {
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  float id = 0, d = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    if (b % span == 0) {  // the scale shared by blocks b..b + span
      // MAXPS returns its second operand when either is NaN: NaN lanes keep the running max.
      __m512 m = _mm512_setzero_ps();
      for (int64_t i = 0; i < 32 * span; i += 16)
        m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 32 * b + i)), m);
      const float amax = _mm512_reduce_max_ps(m);
      id = amax != 0 ? 127.0f / amax : 0.0f;
      d = span == 1 ? _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT))  // FloatToHalf
                    : amax / 127.0f;
    }
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    Q8Block& o = out[b];
    o.d = d;
    const __m512 scale = _mm512_set1_ps(id);
    __m512i q[2];
    const __m512 v[2] = {v0, v1};
    for (int h = 0; h < 2; ++h) {
      __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v[h], scale),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(r), inf, _CMP_LT_OQ);
      r = _mm512_min_ps(_mm512_max_ps(_mm512_maskz_mov_ps(finite, r), lo), hi);
      q[h] = _mm512_cvtps_epi32(r);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + 16 * h), _mm512_cvtepi32_epi8(q[h]));
    }
    o.sum[0] = static_cast<int16_t>(_mm512_reduce_add_epi32(q[0]));
    o.sum[1] = static_cast<int16_t>(_mm512_reduce_add_epi32(q[1]));
    o.dsum = o.d * static_cast<float>(o.sum[0] + o.sum[1]);
  }
}

}  // namespace moe::kernels
