// AVX-512 VNNI kernels on 256-bit vectors (AVX512VL): vpdpbusd does the u8 x s8 products and
// their int32 sums in one instruction, without maddubs' int16 saturation.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/iq4nl.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"

namespace moe::kernels {
namespace avx512vnni {

inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

#include "lib/backend/cpu/dot_x86.inc"

// Two blocks per 512-bit register for the 32-element block types.
inline __m512i Load2x256(const void* a, const void* b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(a))),
      _mm256_loadu_si256(static_cast<const __m256i*>(b)), 1);
}

inline __m512 Scales2(float s0, float s1) {
  return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

float DotQ8_0x2(const uint8_t* w, const Q8Block* x, int64_t n) {
  const int64_t nb = n / 32;
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2, w += 68) {
    const __m512i qw = Load2x256(w + 2, w + 36);
    const __m512i qx = Load2x256(x[b].q, x[b + 1].q);
    // |w| x (x with the sign of w): unsigned x signed products for vpdpbusd.
    const __mmask64 negative = _mm512_movepi8_mask(qw);
    const __m512i sx = _mm512_mask_sub_epi8(qx, negative, _mm512_setzero_si512(), qx);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(qw), sx);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                          Scales2(Half(w) * x[b].d, Half(w + 34) * x[b + 1].d), acc);
  }
  float s = _mm512_reduce_add_ps(acc);
  if (b < nb) s += DotQ8_0(w, x + b, 32);
  return s;
}

float DotQ4_0x2(const uint8_t* w, const Q8Block* x, int64_t n) {
  const int64_t nb = n / 32;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m512 acc = _mm512_setzero_ps();
  float offset = 0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2, w += 36) {
    const __m256i raw = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 20)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
    const __m256i lo = _mm256_and_si256(raw, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    // Element order per block: 16 low nibbles, then 16 high nibbles.
    const __m512i q =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(lo, hi, 0x20)),
                           _mm256_permute2x128_si256(lo, hi, 0x31), 1);
    const __m512i qx = Load2x256(x[b].q, x[b + 1].q);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, qx);
    const float s0 = Half(w) * x[b].d, s1 = Half(w + 18) * x[b + 1].d;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), Scales2(s0, s1), acc);
    offset += s0 * (x[b].sum[0] + x[b].sum[1]) + s1 * (x[b + 1].sum[0] + x[b + 1].sum[1]);
  }
  float s = _mm512_reduce_add_ps(acc) - 8 * offset;
  if (b < nb) s += DotQ4_0(w, x + b, 32);
  return s;
}

// Run-time layouts (repack.h). Per 16 blocks, the 16 weight scales convert in one instruction
// and meet the 16 activation scales in one multiply; each pair of blocks then picks its two
// scales out of that vector with one permute.
struct BlockScales {
  __m512 s;       // weight scale x activation scale, blocks b..b+15
  __m512 offset;  // s x (sum of the activation quants), for the Q4_0 zero point
};

inline BlockScales Scales16(const uint8_t* wscales, const float* xd, const float* xsum, int count) {
  const __mmask16 m = static_cast<__mmask16>((1u << count) - 1);
  const __m512 wd = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, wscales));
  BlockScales r;
  r.s = _mm512_mul_ps(wd, _mm512_maskz_loadu_ps(m, xd));
  r.offset = _mm512_mul_ps(r.s, _mm512_maskz_loadu_ps(m, xsum));
  return r;
}

// Lanes 0-7 take scale k, lanes 8-15 scale k + 1.
inline __m512 PairScales(__m512 s, int k) {
  const __m512i idx = _mm512_add_epi32(
      _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), _mm512_set1_epi32(k));
  return _mm512_permutexvar_ps(idx, s);
}

float DotQ8_0R(const uint8_t* w, const Q8Block* x, const Q8Aux& aux, int64_t n) {
  const float* xd = aux.d;
  const float* xsum = aux.sum;
  const int64_t nb = n / 32;
  const int8_t* q = reinterpret_cast<const int8_t*>(w);
  const uint8_t* scales = w + 32 * nb;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, nb - b0));
    const BlockScales bs = Scales16(scales + 2 * b0, xd + b0, xsum + b0, count);
    int k = 0;
    for (; k + 2 <= count; k += 2) {
      const int64_t b = b0 + k;
      const __m512i qw = _mm512_loadu_si512(q + 32 * b);
      const __m512i qx = Load2x256(x[b].q, x[b + 1].q);
      const __mmask64 negative = _mm512_movepi8_mask(qw);
      const __m512i sx = _mm512_mask_sub_epi8(qx, negative, _mm512_setzero_si512(), qx);
      const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(qw), sx);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), PairScales(bs.s, k), acc);
    }
    if (k < count) {  // an odd last block: lanes 8-15 get a zero scale
      const int64_t b = b0 + k;
      const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
      const __m256i p = DotS8S8(qw, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q)));
      acc = _mm512_fmadd_ps(_mm512_castps256_ps512(_mm256_cvtepi32_ps(p)),
                            _mm512_maskz_mov_ps(0xff, PairScales(bs.s, k)), acc);
    }
  }
  return _mm512_reduce_add_ps(acc);
}

float DotQ4_0R(const uint8_t* w, const Q8Block* x, const Q8Aux& aux, int64_t n) {
  const float* xd = aux.d;
  const float* xsum = aux.sum;
  const int64_t nb = n / 32;  // a multiple of 4 (RepackedType)
  const uint8_t* scales = w + 16 * nb;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), offsets = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, nb - b0));
    const BlockScales bs = Scales16(scales + 2 * b0, xd + b0, xsum + b0, count);
    offsets = _mm512_add_ps(offsets, bs.offset);
    for (int k = 0; k < count; k += 4) {
      const int64_t b = b0 + k;
      const __m512i bytes = _mm512_loadu_si512(w + 16 * b);
      const __m512i lo = _mm512_and_si512(bytes, m4);                        // blocks b, b+1
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), m4);  // blocks b+2, b+3
      const __m512i p0 =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, Load2x256(x[b].q, x[b + 1].q));
      const __m512i p1 =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, Load2x256(x[b + 2].q, x[b + 3].q));
      // Two accumulators: the FMAs of one iteration do not wait for each other.
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), PairScales(bs.s, k), acc);
      acc2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), PairScales(bs.s, k + 2), acc2);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc, acc2)) - 8 * _mm512_reduce_add_ps(offsets);
}

// The twelve Q4_K/Q5_K scale bytes to 8 scales (bytes of the first 8 bytes of `out`) and 8 mins
// (the next 8), with 32-bit word operations instead of 16 scalar unpacks.
inline void UnpackScaleMins16(const uint8_t* scales, uint32_t out[4]) {
  constexpr uint32_t kMask1 = 0x3f3f3f3f, kMask2 = 0x0f0f0f0f, kMask3 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  out[0] = u[0] & kMask1;
  out[1] = (u[2] & kMask2) | (((u[0] >> 6) & kMask3) << 4);
  out[2] = u[1] & kMask1;
  out[3] = ((u[2] >> 4) & kMask2) | (((u[1] >> 6) & kMask3) << 4);
}

// Q4_K with the activations' scales and sums as arrays: per super-block, the 8 sub-block scales
// and mins become float vectors in a few instructions, and each pair of sub-blocks is one
// 512-bit integer product.
float DotQ4_KSplit(const uint8_t* w, const Q8Block* x, const Q8Aux& aux, int64_t n) {
  const float* xd = aux.d;
  const float* xsum = aux.sum;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
  __m256 mins = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 144, x += 8, xd += 8, xsum += 8) {
    uint32_t sm[4];
    UnpackScaleMins16(w + 4, sm);
    const __m256 sc = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm))));
    const __m256 mn = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 2))));
    const __m256 d8 = _mm256_loadu_ps(xd);
    // d * sc_j * xd_j per sub-block; dmin * mn_j * xd_j * xsum_j summed at the end.
    const __m256 s = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(Half(w)), sc), d8);
    mins = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(Half(w + 2)), mn), d8),
                           _mm256_loadu_ps(xsum), mins);
    const __m512 s16 = _mm512_castps256_ps512(s);
    const uint8_t* qs = w + 16;
    for (int k = 0; k < 4; ++k) {
      const __m512i raw =
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * k)));
      // Low nibbles are sub-block 2k, high ones 2k+1: one 512-bit register of 64 quants.
      const __m512i both =
          _mm512_inserti64x4(raw, _mm512_castsi512_si256(_mm512_srli_epi16(raw, 4)), 1);
      const __m512i q = _mm512_and_si512(both, m4);
      const __m512i p =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, Load2x256(x[2 * k].q, x[2 * k + 1].q));
      __m512& a = k % 2 ? acc2 : acc;  // two chains of FMAs
      a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), PairScales(s16, 2 * k), a);
    }
  }
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(mins), _mm256_extractf128_ps(mins, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm512_reduce_add_ps(_mm512_add_ps(acc, acc2)) - _mm_cvtss_f32(m);
}

// Q6_K: per 128-element half, one 64-byte load of low nibbles gives two 32-element groups and its
// high nibbles two more; the 2-bit high parts come from one 32-byte load shifted four ways. The
// sixteen 16-element scales of a super-block meet the activation scales in one vector.
float DotQ6_KSplit(const uint8_t* w, const Q8Block* x, const Q8Aux& aux, int64_t n) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
  const __m512i quad_idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), offsets = _mm512_setzero_ps();
  const float* xd = aux.d;
  const float* xsum16 = aux.sum16;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 210, x += 8, xd += 8, xsum16 += 16) {
    const __m512 sc = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192))));
    // Group g (16 elements) lies in activation block g / 2.
    const __m512 xd16 = _mm512_permutexvar_ps(
        _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                          1),
        _mm512_castps256_ps512(_mm256_loadu_ps(xd)));
    const __m512 s = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(Half(w + 208)), sc), xd16);
    offsets = _mm512_fmadd_ps(s, _mm512_loadu_ps(xsum16), offsets);
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(w + 64 * half);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * half));
      const __m512i qh01 =
          _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i qh23 = _mm512_srli_epi16(qh01, 4);
      // Groups j = 0, 1 (low nibbles) and j = 2, 3 (high nibbles) of this half.
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                          _mm512_slli_epi16(_mm512_and_si512(qh01, m2), 4));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(qh23, m2), 4));
      const Q8Block* xb = x + 4 * half;
      const __m512i p01 =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), q01, Load2x256(xb[0].q, xb[1].q));
      const __m512i p23 =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), q23, Load2x256(xb[2].q, xb[3].q));
      // Four lanes per 16-element scale: groups 8 half + 0..3, then 8 half + 4..7.
      const __m512 s01 =
          _mm512_permutexvar_ps(_mm512_add_epi32(quad_idx, _mm512_set1_epi32(8 * half)), s);
      const __m512 s23 =
          _mm512_permutexvar_ps(_mm512_add_epi32(quad_idx, _mm512_set1_epi32(8 * half + 4)), s);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p01), s01, acc);
      acc2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p23), s23, acc2);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc, acc2)) - 32 * _mm512_reduce_add_ps(offsets);
}

}  // namespace avx512vnni

QuantDotFn Avx512VnniQuantDot(DType t) {
  if (t == DType::kQ8_0) return avx512vnni::DotQ8_0x2;
  if (t == DType::kQ4_0) return avx512vnni::DotQ4_0x2;
  return avx512vnni::QuantDotTable(t);
}

SplitQuantDotFn Avx512VnniSplitQuantDot(DType t) {
  if (t == DType::kQ8_0R) return avx512vnni::DotQ8_0R;
  if (t == DType::kQ4_0R) return avx512vnni::DotQ4_0R;
  if (t == DType::kQ4_K) return avx512vnni::DotQ4_KSplit;
  if (t == DType::kQ6_K) return avx512vnni::DotQ6_KSplit;
  return nullptr;
}

}  // namespace moe::kernels
