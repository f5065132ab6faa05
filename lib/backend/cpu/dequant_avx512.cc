// AVX-512 row dequantization for prompt processing, where rows are dequantized once and reused by
// every token of the batch. Bit-identical to the portable block decoders (lib/backend/
// block_decode.h: same multiplies, no fused multiply-adds).
#include <immintrin.h>

#include <cstring>

#include "lib/backend/cpu/dequant_kernels.h"
#include "lib/backend/cpu/kquant_scales.h"

namespace moe::kernels {
namespace {

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 16 int8 -> floats x d.
inline void Store16S8(const void* q, float d, float* dst) {
  const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(q)));
  _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(v)));
}

// 16 unsigned nibble values (bytes 0..15) -> d * (q - offset) - min, as the portable code does.
inline void Store16U8(__m128i q, float d, float min, int offset, float* dst) {
  const __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(offset));
  __m512 r = _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(v));
  if (min != 0.0f) r = _mm512_sub_ps(r, _mm512_set1_ps(min));
  _mm512_storeu_ps(dst, r);
}

void Q8_0(const uint8_t* row, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, row += 34, dst += 32) {
    const float d = Half(row);
    Store16S8(row + 2, d, dst);
    Store16S8(row + 18, d, dst + 16);
  }
}

void Q8_0R(const uint8_t* row, float* dst, int64_t n) {
  const int64_t nb = n / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const float d = Half(row + 32 * nb + 2 * b);
    Store16S8(row + 32 * b, d, dst + 32 * b);
    Store16S8(row + 32 * b + 16, d, dst + 32 * b + 16);
  }
}

void Q4_0(const uint8_t* row, float* dst, int64_t n) {
  const __m128i m4 = _mm_set1_epi8(0x0f);
  for (int64_t b = 0; b < n / 32; ++b, row += 18, dst += 32) {
    const float d = Half(row);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    Store16U8(_mm_and_si128(raw, m4), d, 0.0f, 8, dst);
    Store16U8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), d, 0.0f, 8, dst + 16);
  }
}

void Q4_0R(const uint8_t* row, float* dst, int64_t n) {
  const int64_t nb = n / 32;
  const __m128i m4 = _mm_set1_epi8(0x0f);
  for (int64_t g = 0; g < nb / 4; ++g) {
    const uint8_t* bytes = row + 64 * g;
    float* out = dst + 128 * g;
    for (int c = 0; c < 4; ++c) {  // 16-byte chunks: elements 16c.. (low) and 64 + 16c.. (high)
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 16 * c));
      const float d_lo = Half(row + 16 * nb + 2 * (4 * g + c / 2));
      const float d_hi = Half(row + 16 * nb + 2 * (4 * g + 2 + c / 2));
      Store16U8(_mm_and_si128(raw, m4), d_lo, 0.0f, 8, out + 16 * c);
      Store16U8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), d_hi, 0.0f, 8, out + 64 + 16 * c);
    }
  }
}

void Q4_K(const uint8_t* row, float* dst, int64_t n) {
  const __m128i m4 = _mm_set1_epi8(0x0f);
  for (int64_t sb = 0; sb < n / 256; ++sb, row += 144, dst += 256) {
    const float d = Half(row), dmin = Half(row + 2);
    uint8_t sc[8], mn[8];
    UnpackScaleMins(row + 4, sc, mn);
    const uint8_t* q = row + 16;
    for (int k = 0; k < 4; ++k) {
      const float d1 = d * sc[2 * k], m1 = dmin * mn[2 * k];
      const float d2 = d * sc[2 * k + 1], m2 = dmin * mn[2 * k + 1];
      for (int h = 0; h < 2; ++h) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * k + 16 * h));
        Store16U8(_mm_and_si128(raw, m4), d1, m1, 0, dst + 64 * k + 16 * h);
        Store16U8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), d2, m2, 0, dst + 64 * k + 32 + 16 * h);
      }
    }
  }
}

void Q6_K(const uint8_t* row, float* dst, int64_t n) {
  const __m128i m4 = _mm_set1_epi8(0x0f), m2 = _mm_set1_epi8(3);
  for (int64_t sb = 0; sb < n / 256; ++sb, row += 210, dst += 256) {
    const float d = Half(row + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(row + 192);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = row + 64 * half;
      const uint8_t* qh = row + 128 + 32 * half;
      const int8_t* sc = scales + 8 * half;
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {  // elements l = 16h .. 16h + 15 of group j
          const __m128i src =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16 * h + (j % 2 ? 32 : 0)));
          const __m128i low =
              j >= 2 ? _mm_and_si128(_mm_srli_epi16(src, 4), m4) : _mm_and_si128(src, m4);
          const __m128i hbits = _mm_and_si128(
              _mm_srl_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16 * h)),
                            _mm_cvtsi32_si128(2 * j)),
              m2);
          const __m128i q = _mm_or_si128(low, _mm_slli_epi16(hbits, 4));
          // The portable code computes d * sc * (q - 32) as (d * sc) * (q - 32).
          Store16U8(q, d * sc[2 * j + h], 0.0f, 32, dst + 128 * half + 32 * j + 16 * h);
        }
      }
    }
  }
}

}  // namespace

DequantRowFn Avx512DequantRow(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return Q8_0;
    case DType::kQ8_0R:
      return Q8_0R;
    case DType::kQ4_0:
      return Q4_0;
    case DType::kQ4_0R:
      return Q4_0R;
    case DType::kQ4_K:
      return Q4_K;
    case DType::kQ6_K:
      return Q6_K;
    default:
      return nullptr;
  }
}

}  // namespace moe::kernels
