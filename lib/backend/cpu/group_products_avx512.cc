// AVX-512 VNNI kernels for the row-group layouts (repack.h). Per block, the 16 rows' quants sit
// in lane vectors; each vpdpbusd multiplies one of them with four activation bytes broadcast to
// all lanes, adding four products to each row's int32 sum. The weights of a block are loaded
// once and reused for up to kMaxTokens tokens, whose float sums stay in registers.
#include <immintrin.h>

#include "lib/backend/cpu/group_products.h"
#include "lib/backend/cpu/iq4nl.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/backend/cpu/opaque.h"
#include "lib/backend/cpu/prefetch.h"

namespace moe::kernels {
namespace {

constexpr int kMaxTokens = 8;

// acc + the products of w's bytes with the four bytes at p, which the instruction broadcasts
// from memory itself: GCC 12 loads a set1_epi32 into a register first, an extra vector
// instruction per vpdpbusd (measured: +2-4 % on the group kernels).
inline __m512i DpbusdBroadcast(__m512i acc, __m512i w, const int8_t* p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// acc + per row the products of w's two int16 words with the two int16 at p, broadcast.
inline __m512i DpwssdBroadcast(__m512i acc, __m512i w, const int16_t* p) {
  __asm__("vpdpwssd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// What a block's int32 sums start from to take the weights' zero point back off: -zero times
// the activation quants' sum, from the block's two int16 half sums broadcast from memory and
// `minus_zero` (-zero in each int16 of both halves, or in one of them for a half's sum) by one
// vpdpwssd. Made with scalar code and a broadcast from a general register it was 7 instructions
// a block and token, about an eighth of a decode tile's.
inline __m512i ZeroPointStart(const Q8Block& x, __m512i minus_zero) {
  return DpwssdBroadcast(_mm512_setzero_si512(), minus_zero, x.sum);
}

inline __m512 HalfScales(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline int QuantSum(const Q8Block& b) { return b.sum[0] + b.sum[1]; }

// A K-quant tile with one activation scale per super-block (kSuperScale) keeps its tokens' sums
// in y, not in registers (those are the lane groups'): y[t] (0 for the first super-block) plus
// part[t] x token t's scale, the same operation as on a register.
template <int T>
inline void StoreSuperBlock(const __m512 part[T], const Q8Block* x, int64_t nb, bool first,
                            float* y, int64_t ldy) {
  for (int t = 0; t < T; ++t) {
    const __m512 before = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + t * ldy);
    _mm512_storeu_ps(y + t * ldy, _mm512_fmadd_ps(part[t], _mm512_set1_ps(x[t * nb].d), before));
  }
}

// The 16 rows' sums over one 32-quant block: q[k] holds quants 4k..4k+3 of every row (k < 8),
// `first` is the int32 value each sum starts from. Two chains so the products overlap.
inline __m512i BlockSums(const __m512i q[8], const Q8Block& x, __m512i first) {
  __m512i a = first, b = _mm512_setzero_si512();
  for (int k = 0; k < 8; k += 2) {
    a = DpbusdBroadcast(a, q[k], x.q + 4 * k);
    b = DpbusdBroadcast(b, q[k + 1], x.q + 4 * k + 4);
  }
  return _mm512_add_epi32(a, b);
}

// The 32-quant block types: per block, lane vectors that unpack to q[k] = quants 4k..4k+3 of
// the 16 rows (k < 8), then the rows' 16 scales. Quants are unsigned with a zero point,
// taken back off through the activation quants' sum; types with a minimum per block (Q4_1,
// Q5_1: x = d q + m) add m times the activations' sum instead (kHasMin).
template <typename Unpack>
struct Block32Group {
  static constexpr int64_t kBlockElems = 32, kBlockBytes = Unpack::kBlockBytes;
  template <int T>
  static void Tile(const uint8_t* g, int64_t nb, const Q8Block* x, const SplitSums* /*xs*/,
                   float* y, int64_t ldy, const uint8_t* next) {
    const __m512i minus_zero = _mm512_set1_epi16(-Unpack::kZero);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
      if (next) PrefetchStreamToL1(next + b * kBlockBytes, kBlockBytes);
      __m512i q[8];
      Unpack::Quants(g, q);
      const __m512 d = Unpack::Scales(g);
      __m512 m = _mm512_setzero_ps();  // the rows' minimums, read once for all tokens
      if constexpr (Unpack::kHasMin) m = Unpack::Mins(g);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * nb + b];
        const __m512i s = BlockSums(
            q, xb, Unpack::kZero == 0 ? _mm512_setzero_si512() : ZeroPointStart(xb, minus_zero));
        acc[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(xb.d)), acc[t]);
        if constexpr (Unpack::kHasMin) {
          acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xb.d * QuantSum(xb)), acc[t]);
        }
      }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
  }
};

// Q8_0X16: 8 lane vectors of q + 128 (544 bytes a block).
struct Q8_0Unpack {
  static constexpr int64_t kBlockBytes = 544;
  static constexpr int kZero = 128;
  static constexpr bool kHasMin = false;
  static void Quants(const uint8_t* g, __m512i q[8]) {
    for (int k = 0; k < 8; ++k) q[k] = _mm512_loadu_si512(g + 64 * k);
  }
  static __m512 Scales(const uint8_t* g) { return HalfScales(g + 512); }
};

// Q4_0X16: 4 lane vectors of nibbles, low = quants 4k.., high = 16 + 4k.. (288 bytes a block).
struct Q4_0Unpack {
  static constexpr int64_t kBlockBytes = 288;
  static constexpr int kZero = 8;
  static constexpr bool kHasMin = false;
  static void Quants(const uint8_t* g, __m512i q[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int k = 0; k < 4; ++k) {
      const __m512i raw = _mm512_loadu_si512(g + 64 * k);
      q[k] = _mm512_and_si512(raw, m4);
      q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    }
  }
  static __m512 Scales(const uint8_t* g) { return HalfScales(g + 256); }
};

// MXFP4X16: 4 lane vectors of codes as Q4_0X16's nibbles, then 16 E8M0 bytes (272 bytes a
// block). A byte shuffle turns each code into twice its E2M1 value plus 12 (0..24, unsigned);
// the scale 2^(e - 128) is exact through vscalefps, subnormals included.
struct Mxfp4Unpack {
  static constexpr int64_t kBlockBytes = 272;
  static constexpr int kZero = kMxfp4Zero;
  static constexpr bool kHasMin = false;
  static void Quants(const uint8_t* g, __m512i q[8]) {
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4ShiftedValues)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int k = 0; k < 4; ++k) {
      const __m512i raw = _mm512_loadu_si512(g + 64 * k);
      q[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, m4));
      q[k + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
    }
  }
  static __m512 Scales(const uint8_t* g) {
    const __m512i e =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 256)));
    return _mm512_scalef_ps(_mm512_set1_ps(1.f),
                            _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(128))));
  }
};

// IQ4_NLX16: Q4_0X16's layout (288 bytes a block); a byte shuffle turns each index into its
// table value plus 128 (unsigned).
struct Iq4NlUnpack {
  static constexpr int64_t kBlockBytes = 288;
  static constexpr int kZero = kIq4nlZero;
  static constexpr bool kHasMin = false;
  static void Quants(const uint8_t* g, __m512i q[8]) {
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlShiftedValues)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int k = 0; k < 4; ++k) {
      const __m512i raw = _mm512_loadu_si512(g + 64 * k);
      q[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, m4));
      q[k + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
    }
  }
  static __m512 Scales(const uint8_t* g) { return HalfScales(g + 256); }
};

// Adds 16 to the quants of q[8] (Q4_0X16's nibbles) whose fifth bit is set in `high`, the
// vector whose lane r holds row r's 32 fifth bits. Lane vector k holds quants 4k..4k+3 of each
// row, whose fifth bits are bits 4k..4k+3 of the lane's dword: byte k / 2 of it, from bit
// 4 (k % 2). A byte shuffle copies that byte to the lane's four bytes, a test with bits 1, 2, 4,
// 8 (shifted) picks each one's bit, and the quants it marks get 16.
inline void AddFifthBits(__m512i high, __m512i q[8]) {
  const __m512i sixteen = _mm512_set1_epi8(16);
  // Byte 4d + i of each 128-bit lane reads byte 4d + b of it (b: which byte of the dword).
  const __m512i lane_base = _mm512_add_epi8(_mm512_set1_epi64(0x0404040400000000),
                                            _mm512_set4_epi32(0x08080808, 0x08080808, 0, 0));
  for (int k = 0; k < 8; ++k) {
    const __m512i spread =
        _mm512_shuffle_epi8(high, _mm512_add_epi8(lane_base, _mm512_set1_epi8(k / 2)));
    const __mmask64 set = _mm512_test_epi8_mask(
        spread, _mm512_set1_epi32(k % 2 ? static_cast<int>(0x80402010) : 0x08040201));
    q[k] = _mm512_mask_add_epi8(q[k], set, q[k], sixteen);
  }
}

// Q5_0X16: Q4_0X16's nibble vectors, one vector whose lane r holds row r's 32 fifth bits, then
// the 16 f16 scales (352 bytes a block).
struct Q5_0Unpack {
  static constexpr int64_t kBlockBytes = 352;
  static constexpr int kZero = 16;
  static constexpr bool kHasMin = false;
  static void Quants(const uint8_t* g, __m512i q[8]) {
    Q4_0Unpack::Quants(g, q);
    AddFifthBits(_mm512_loadu_si512(g + 256), q);
  }
  static __m512 Scales(const uint8_t* g) { return HalfScales(g + 320); }
};

// Q4_1X16: Q4_0X16's nibble vectors, the 16 f16 d, the 16 f16 m (320 bytes a block).
struct Q4_1Unpack {
  static constexpr int64_t kBlockBytes = 320;
  static constexpr int kZero = 0;
  static constexpr bool kHasMin = true;
  static void Quants(const uint8_t* g, __m512i q[8]) { Q4_0Unpack::Quants(g, q); }
  static __m512 Scales(const uint8_t* g) { return HalfScales(g + 256); }
  static __m512 Mins(const uint8_t* g) { return HalfScales(g + 288); }
};

// Q5_1X16: Q5_0X16's layout, then the 16 f16 m (384 bytes a block).
struct Q5_1Unpack {
  static constexpr int64_t kBlockBytes = 384;
  static constexpr int kZero = 0;
  static constexpr bool kHasMin = true;
  static void Quants(const uint8_t* g, __m512i q[8]) { Q5_0Unpack::Quants(g, q); }
  static __m512 Scales(const uint8_t* g) { return HalfScales(g + 320); }
  static __m512 Mins(const uint8_t* g) { return HalfScales(g + 352); }
};

// IQ4_XSX16 super-block (2176 bytes): the 16 rows' f16 d, their 16-bit scales_h words, their
// 32-bit scales_l words (lane r: row r's), then per 32-value block IQ4_NLX16's four nibble
// vectors. Block ib's 6-bit scale of a row is bits 4 ib.. of its scales_l word and bits 2 ib..
// of its scales_h word, less 32: one shift and mask each for all 16 rows.
struct Iq4XsGroup {
  static constexpr int64_t kBlockElems = 256, kBlockBytes = 2176;
  template <int T>
  static void Tile(const uint8_t* g, int64_t nsb, const Q8Block* x, const SplitSums* /*xs*/,
                   float* y, int64_t ldy, const uint8_t* next) {
    const int64_t nxb = nsb * 8;  // activation blocks a token
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi32(0x0f), m2 = _mm512_set1_epi32(3);
    const __m512i minus_zero = _mm512_set1_epi16(-Iq4NlUnpack::kZero);
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes) {
      if (next) PrefetchStreamToL1(next + sb * kBlockBytes, kBlockBytes);
      const __m512 d = HalfScales(g);
      const __m512i high =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
      const __m512i low = _mm512_loadu_si512(g + 64);
      for (int ib = 0; ib < 8; ++ib) {
        const __m512i ls = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(low, 4 * ib), m4),
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(high, 2 * ib), m2), 4));
        const __m512 dl =
            _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
        __m512i q[8];
        Iq4NlUnpack::Quants(g + 128 + 256 * ib, q);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const Q8Block& xb = x[t * nxb + 8 * sb + ib];
          const __m512i s = BlockSums(q, xb, ZeroPointStart(xb, minus_zero));
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dl, _mm512_set1_ps(xb.d)),
                                   acc[t]);
        }
      }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
  }
};

// Q4_KX16 super-block: 16 f16 d, 16 f16 dmin, 3 lane vectors of packed 6-bit scales/mins, then
// per 64-quant chunk 8 lane vectors of nibbles (low: sub-block 2c, high: 2c + 1); 2304 bytes.
// Q5_KX16 (kFifthBit) has 8 lane vectors of fifth bits before the nibbles (bit j of a byte for
// sub-block j); 2816 bytes. kSuperScale: the activations have one scale per super-block
// (ActivationScales::kPerSuperBlock), multiplied in once per super-block rather than per block.
template <bool kFifthBit, bool kSuperScale>
struct K4Group {
  static constexpr int64_t kBlockElems = 256, kBlockBytes = kFifthBit ? 2816 : 2304;
  static constexpr int64_t kNibbles = kFifthBit ? 768 : 256;

  // Each row's twelve scale bytes to 8 scales and 8 mins, as ggml's get_scale_min_k4 does, on
  // the 16 rows at once: those of sub-block j are byte j % 4 of sc[j / 4] and mn[j / 4].
  static void ScalesMins(const uint8_t* g, __m512i sc[2], __m512i mn[2]) {
    const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m2 = _mm512_set1_epi32(0x03030303);
    const __m512i low4 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i u0 = _mm512_loadu_si512(g + 64), u1 = _mm512_loadu_si512(g + 128),
                  u2 = _mm512_loadu_si512(g + 192);
    sc[0] = _mm512_and_si512(u0, m6);
    sc[1] = _mm512_or_si512(_mm512_and_si512(u2, low4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), m2), 4));
    mn[0] = _mm512_and_si512(u1, m6);
    mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), low4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), m2), 4));
  }

  // factor x byte j % 4 of v[j / 4], per row.
  static __m512 Times(__m512 factor, const __m512i v[2], int j) {
    const __m512i b =
        _mm512_and_si512(_mm512_srli_epi32(v[j / 4], 8 * (j % 4)), _mm512_set1_epi32(0xff));
    return _mm512_mul_ps(factor, _mm512_cvtepi32_ps(b));
  }

  // Sub-block j's quants of the 16 rows: q[k] = quants 4k..4k+3.
  static void Quants(const uint8_t* g, int j, __m512i q[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const uint8_t* nibbles = g + kNibbles + 512 * (j / 2);
    for (int k = 0; k < 8; ++k) {
      const __m512i raw = _mm512_loadu_si512(nibbles + 64 * k);
      q[k] = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(raw, 4) : raw, m4);
      if constexpr (kFifthBit) {  // bit j of each high byte to bit 4: q | (bits & 0x10)
        const __m512i hb = _mm512_loadu_si512(g + 256 + 64 * k);
        const __m512i moved = j <= 4 ? _mm512_slli_epi16(hb, 4 - j) : _mm512_srli_epi16(hb, j - 4);
        q[k] = _mm512_ternarylogic_epi32(q[k], moved, _mm512_set1_epi8(0x10), 0xf8);
      }
    }
  }

  // Per row, the sum over the 8 sub-blocks of min_j x the token's quant sum of block j, as
  // floats: the 6-bit mins (u8) times the split sums (s8), 64 x hi + lo.
  static __m512 MinSums(const __m512i mn[2], const SplitSums& xs) {
    const int8_t* parts = reinterpret_cast<const int8_t*>(xs.words);
    __m512i m = DpbusdBroadcast(_mm512_setzero_si512(), mn[0], parts);
    m = _mm512_slli_epi32(DpbusdBroadcast(m, mn[1], parts + 4), 6);
    m = DpbusdBroadcast(DpbusdBroadcast(m, mn[0], parts + 8), mn[1], parts + 12);
    return _mm512_cvtepi32_ps(m);
  }

  // A quarter of the next group's super-block sb, per 64-quant chunk c.
  static void Prefetch(const uint8_t* next, int64_t sb, int c) {
    if (next) PrefetchStreamToL1(next + sb * kBlockBytes + c * kBlockBytes / 4, kBlockBytes / 4);
  }

  // kSuperScale: the sub-blocks' sums times the rows' scales, less the minimums times the split
  // sums (xs), are added up first (part), then multiplied by the token's one scale per
  // super-block. Otherwise each block's sum meets its own scale, and xs is not read.
  template <int T>
  static void Tile(const uint8_t* g, int64_t nsb, const Q8Block* x, const SplitSums* xs, float* y,
                   int64_t ldy, const uint8_t* next) {
    const int64_t nb = 8 * nsb;  // activation blocks per token
    __m512 acc[T], part[T];      // acc: with a scale per block only (kSuperScale sums in y)
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes) {
      for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_ps();
      const __m512 d = HalfScales(g), dmin = HalfScales(g + 32);
      __m512i sc[2], mn[2];
      ScalesMins(g, sc, mn);
      if constexpr (kSuperScale) {
        for (int t = 0; t < T; ++t)
          part[t] = _mm512_fnmadd_ps(MinSums(mn, xs[t * nsb + sb]), dmin, part[t]);
      }
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        if (j % 2 == 0) Prefetch(next, sb, j / 2);
        const __m512 scale = Times(d, sc, j);
        const __m512 min = kSuperScale ? _mm512_setzero_ps() : Times(dmin, mn, j);
        __m512i q[8];
        Quants(g, j, q);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const Q8Block& xb = x[t * nb + 8 * sb + j];
          const __m512i s = BlockSums(q, xb, _mm512_setzero_si512());
          if constexpr (kSuperScale) {
            part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, part[t]);
          } else {
            const __m512 xd = _mm512_set1_ps(xb.d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(scale, xd), acc[t]);
            acc[t] = _mm512_fnmadd_ps(min, _mm512_set1_ps(xb.dsum), acc[t]);
          }
        }
      }
      if constexpr (kSuperScale) StoreSuperBlock<T>(part, x + 8 * sb, nb, sb == 0, y, ldy);
    }
    if constexpr (!kSuperScale) {
      for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
    }
  }
};

// Q6_KX16 super-block: 16 f16 d, 4 lane vectors of int8 scales (one per 16 quants), then per
// 128-quant half and lane group k (quants 4k..4k+3 of each 32-quant block) three lane vectors:
// low-nibble bytes of blocks 0|2, of blocks 1|3, and the 2-bit high parts of all four; 3360
// bytes, read front to back. Quants are 0..63 with a zero point of 32; each 32-quant activation
// block meets two scales, so its two 16-quant halves are summed apart. kSuperScale: as K4Group.
template <bool kSuperScale>
struct Q6_KGroup {
  static constexpr int64_t kBlockElems = 256, kBlockBytes = 3360;

  // Scale i (of 16) of the 16 rows as floats times d: byte i % 4 of lane vector i / 4.
  static __m512 Scale(const uint8_t* g, __m512 d, int i) {
    const __m512i v = _mm512_loadu_si512(g + 32 + 64 * (i / 4));
    return _mm512_mul_ps(
        d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * (i % 4)), 24)));
  }

  // -32 x each half's activation sum, in every lane: where the quants' sums start. Both come from
  // one broadcast of the two int16 sums by vpmaddwd, not through the integer registers (four
  // instructions each, a quarter of a batch tile's instructions).
  static void ZeroPointSums(const Q8Block& xb, __m512i& lo, __m512i& hi) {
    const __m512i pair = _mm512_broadcastd_epi32(_mm_loadu_si32(xb.sum));
    lo = _mm512_madd_epi16(pair, _mm512_set1_epi32(0x0000ffe0));  // words (-32, 0)
    hi = _mm512_madd_epi16(pair, _mm512_set1_epi32(static_cast<int32_t>(0xffe00000)));
  }

  // Lane group k of block s (of 4) in a half: nibbles | (high part at bits 4-5).
  static __m512i Quants(const uint8_t* half, int s, int k) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i l = _mm512_loadu_si512(half + 192 * k + 64 * (s & 1));
    const __m512i nib = _mm512_and_si512(s < 2 ? l : _mm512_srli_epi16(l, 4), m4);
    __m512i hb = _mm512_loadu_si512(half + 192 * k + 128);
    if (s < 2) hb = _mm512_slli_epi16(hb, 4 - 2 * s);
    if (s == 3) hb = _mm512_srli_epi16(hb, 2);
    return _mm512_ternarylogic_epi32(nib, hb, m30, 0xf8);  // nib | (hb & 0x30)
  }

  // One token. Assembling a 6-bit quant costs three or four vector operations; with one token
  // they are what the kernel spends its time on, not vpdpbusd. So the parts are multiplied
  // where they lie: the nibble with its bits masked in place (blocks 2 and 3 lie in the high
  // nibble, 16x their value) and the high bits masked in place (block s: 4^s x their value),
  // each by its own vpdpbusd on one broadcast of the activations, and the sums are brought to
  // scale by one shift per chain. The integer sums are the same as the assembled quants': the
  // same bits, at about 1.2x the speed in L2.
  static void Decode(const uint8_t* g, int64_t nsb, const Q8Block* x, float* y,
                     const uint8_t* next) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8(static_cast<char>(0xf0));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes, x += 8) {
      if (next) PrefetchStreamToL1(next + sb * kBlockBytes, kBlockBytes);
      const __m512 d = HalfScales(g);
      __m512 part = _mm512_setzero_ps();  // kSuperScale: before the activation scale
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const uint8_t* half = g + 288 + 1536 * h;
        const Q8Block* xb = x + 4 * h;
        // Block s, quants 0-15 | 16-31: the nibbles' sums from the zero point's offset on (16x
        // for blocks 2 and 3), and the high parts' sums.
        __m512i sums[4][2], high[4][2];
        for (int s = 0; s < 4; ++s) {
          const int scale = s < 2 ? -32 : -32 * 16;
          for (int e = 0; e < 2; ++e) {
            sums[s][e] = _mm512_set1_epi32(scale * xb[s].sum[e]);
            high[s][e] = _mm512_setzero_si512();
          }
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const __m512i l02 = _mm512_loadu_si512(half + 192 * k),
                        l13 = _mm512_loadu_si512(half + 192 * k + 64),
                        hb = _mm512_loadu_si512(half + 192 * k + 128);
          for (int s = 0; s < 4; ++s) {
            const __m512i nibble = _mm512_and_si512(s & 1 ? l13 : l02, s < 2 ? low4 : high4);
            const __m512i high_bits =
                _mm512_and_si512(hb, _mm512_set1_epi8(static_cast<char>(3 << (2 * s))));
            const __m512i xv =
                _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xb[s].q + 4 * k));
            sums[s][k / 4] = _mm512_dpbusd_epi32(sums[s][k / 4], nibble, xv);
            high[s][k / 4] = _mm512_dpbusd_epi32(high[s][k / 4], high_bits, xv);
          }
        }
        for (int e = 0; e < 2; ++e) {  // to quant x activation sums: high bits are 16 x value
          sums[0][e] = _mm512_add_epi32(sums[0][e], _mm512_slli_epi32(high[0][e], 4));
          sums[1][e] = _mm512_add_epi32(sums[1][e], _mm512_slli_epi32(high[1][e], 2));
          sums[2][e] = _mm512_add_epi32(_mm512_srai_epi32(sums[2][e], 4), high[2][e]);
          sums[3][e] =
              _mm512_add_epi32(_mm512_srai_epi32(sums[3][e], 4), _mm512_srai_epi32(high[3][e], 2));
        }
        for (int s = 0; s < 4; ++s) {
          const __m512 xd = _mm512_set1_ps(xb[s].d);
          for (int e = 0; e < 2; ++e) {
            const __m512 scale = Scale(g, d, 8 * h + 2 * s + e);
            if constexpr (kSuperScale) {
              part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[s][e]), scale, part);
            } else {
              acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[s][e]), _mm512_mul_ps(scale, xd), acc);
            }
          }
        }
      }
      if constexpr (kSuperScale) acc = _mm512_fmadd_ps(part, _mm512_set1_ps(x[0].d), acc);
    }
    _mm512_storeu_ps(y, acc);
  }

  template <int T>
  static void Tile(const uint8_t* g, int64_t nsb, const Q8Block* x, const SplitSums* /*xs*/,
                   float* y, int64_t ldy, const uint8_t* next) {
    if constexpr (T == 1) {
      Decode(g, nsb, x, y, next);
      return;
    }
    const int64_t nb = 8 * nsb;
    __m512 acc[T], part[T];  // as in K4Group
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes) {
      for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_ps();
      const __m512 d = HalfScales(g);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const uint8_t* half = g + 288 + 1536 * h;
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {  // activation block 4h + s
          if (next)
            PrefetchStreamToL1(next + sb * kBlockBytes + (4 * h + s) * kBlockBytes / 8,
                               kBlockBytes / 8);
          const __m512 scale0 = Scale(g, d, 8 * h + 2 * s), scale1 = Scale(g, d, 8 * h + 2 * s + 1);
          // Blocks s and s + 2 read the same nibble bytes: loaded again, not kept on the stack.
          const uint8_t* lanes = Opaque(half);
          __m512i q[8];
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) q[k] = Quants(lanes, s, k);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const Q8Block& xb = x[t * nb + 8 * sb + 4 * h + s];
            __m512i lo, hi;
            ZeroPointSums(xb, lo, hi);
            for (int k = 0; k < 4; ++k) {
              lo = DpbusdBroadcast(lo, q[k], xb.q + 4 * k);
              hi = DpbusdBroadcast(hi, q[k + 4], xb.q + 16 + 4 * k);
            }
            if constexpr (kSuperScale) {
              part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), scale0, part[t]);
              part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), scale1, part[t]);
            } else {
              const __m512 xd = _mm512_set1_ps(xb.d);
              acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(scale0, xd), acc[t]);
              acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(scale1, xd), acc[t]);
            }
          }
        }
      }
      if constexpr (kSuperScale) StoreSuperBlock<T>(part, x + 8 * sb, nb, sb == 0, y, ldy);
    }
    if constexpr (!kSuperScale) {
      for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
    }
  }
};

// Q2_KX16 (kThreeBit false) and Q3_KX16 super-blocks (repack.h): per lane group k the quant bytes
// 4k.. of each 128-quant half, whose 2-bit field s holds block 4h + s (Q3_K: after its high-bit
// bytes, whose bit b is block b's third bit). One scale per 16 quants, so each 32-quant
// activation block's halves are summed apart, as in Q6_KGroup. Q2_K subtracts a minimum per 16
// quants (dmin x min x the activations' half sums, by vpdpwssd); Q3_K's quants are stored + 4,
// taken back off through the half sums. kSuperScale: as K4Group.
template <bool kThreeBit, bool kSuperScale>
struct LowBitKGroup {
  static constexpr int64_t kBlockElems = 256, kBlockBytes = kThreeBit ? 1760 : 1344;
  static constexpr int64_t kLaneGroups = kThreeBit ? 224 : 320,
                           kLaneGroupBytes = kThreeBit ? 192 : 128;

  // Q2_K: the two scale bytes of block b (16-quant groups 2b and 2b + 1) of each row, as int16
  // words: bytes 2 (b % 2) and 2 (b % 2) + 1 of lane vector b / 2.
  static __m512i Q2ScaleWords(const uint8_t* g, int b) {
    const int i = 2 * (b % 2);
    const __m512i pick = _mm512_broadcast_i32x4(_mm_setr_epi8(
        i, -1, i + 1, -1, 4 + i, -1, 5 + i, -1, 8 + i, -1, 9 + i, -1, 12 + i, -1, 13 + i, -1));
    return _mm512_shuffle_epi8(_mm512_loadu_si512(g + 64 + 64 * (b / 2)), pick);
  }

  // Q3_K: its sixteen 6-bit scales per row as UnpackQ3Scales makes them, the bytes of scales
  // 4i..4i+3 in u[i], each stored as (scale + 32) ^ 32: a signed 6-bit field whose value is
  // the scale.
  static void Q3Scales(const uint8_t* g, __m512i u[4]) {
    const __m512i a0 = _mm512_loadu_si512(g + 32), a1 = _mm512_loadu_si512(g + 96),
                  a2 = _mm512_loadu_si512(g + 160);
    const __m512i low4 = _mm512_set1_epi32(0x0f0f0f0f), low2 = _mm512_set1_epi32(0x03030303);
    const __m512i flip = _mm512_set1_epi32(0x20202020);
    const __m512i high[4] = {
        _mm512_slli_epi32(_mm512_and_si512(a2, low2), 4),
        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, 2), low2), 4),
        _mm512_and_si512(a2, _mm512_set1_epi32(0x30303030)),
        _mm512_and_si512(_mm512_srli_epi32(a2, 2), _mm512_set1_epi32(0x30303030)),
    };
    const __m512i low[4] = {_mm512_and_si512(a0, low4), _mm512_and_si512(a1, low4),
                            _mm512_and_si512(_mm512_srli_epi32(a0, 4), low4),
                            _mm512_and_si512(_mm512_srli_epi32(a1, 4), low4)};
    for (int i = 0; i < 4; ++i) u[i] = _mm512_ternarylogic_epi32(low[i], high[i], flip, 0x56);
  }

  // Block b's two 16-quant scales of the 16 rows, times d: Q3_K's from u (Q3Scales), Q2_K's
  // from its scale words (Q2ScaleWords).
  static void BlockScales(const __m512i u[4], __m512i words, __m512 d, int b, __m512 s[2]) {
    if constexpr (kThreeBit) {
      for (int e = 0; e < 2; ++e) {
        const int i = 2 * b + e;  // byte i % 4 of u[i / 4], sign-extended from 6 bits
        const __m512i v = _mm512_srai_epi32(_mm512_slli_epi32(u[i / 4], 26 - 8 * (i % 4)), 26);
        s[e] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(v));
      }
    } else {
      const __m512i m4 = _mm512_set1_epi32(0x0f);
      s[0] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(words, m4)));
      s[1] =
          _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(words, 16), m4)));
    }
  }

  // Block b's quants of the 16 rows: q[k] = quants 4k..4k+3.
  static void Quants(const uint8_t* g, int b, __m512i q[8]) {
    const int h = b / 4, s = b % 4;
    const __m512i m2 = _mm512_set1_epi8(3);
    for (int k = 0; k < 8; ++k) {
      const uint8_t* lanes = g + kLaneGroups + kLaneGroupBytes * k;
      const __m512i raw = _mm512_loadu_si512(lanes + 64 * (h + (kThreeBit ? 1 : 0)));
      if constexpr (kThreeBit) {  // (low >> 2s) & 3 | (bit b of high) << 2
        const __m512i hb = _mm512_loadu_si512(lanes);
        const __m512i moved = b <= 2 ? _mm512_slli_epi16(hb, 2 - b) : _mm512_srli_epi16(hb, b - 2);
        const __m512i low = s ? _mm512_srli_epi16(raw, 2 * s) : raw;
        q[k] = _mm512_and_si512(_mm512_ternarylogic_epi32(low, moved, _mm512_set1_epi8(4), 0xd8),
                                _mm512_set1_epi8(7));
      } else {
        q[k] = _mm512_and_si512(s ? _mm512_srli_epi16(raw, 2 * s) : raw, m2);
      }
    }
  }

  // Q2_K with one activation scale per super-block: part[t] = -dmin x (per row, the minimums
  // times token t's half sums over the super-block), before the activation scale.
  template <int T>
  static void MinusMinSums(const uint8_t* g, __m512 dmin, const Q8Block* x, int64_t nb,
                           __m512 part[T]) {
    __m512i mins[8];
    for (int b = 0; b < 8; ++b) mins[b] = _mm512_srli_epi16(Q2ScaleWords(g, b), 4);
    const __m512 minus_dmin = _mm512_sub_ps(_mm512_setzero_ps(), dmin);
    for (int t = 0; t < T; ++t) {
      __m512i m = _mm512_setzero_si512();
      for (int b = 0; b < 8; ++b) m = DpwssdBroadcast(m, mins[b], x[t * nb + b].sum);
      part[t] = _mm512_mul_ps(minus_dmin, _mm512_cvtepi32_ps(m));
    }
  }

  template <int T>
  static void Tile(const uint8_t* g, int64_t nsb, const Q8Block* x, const SplitSums* /*xs*/,
                   float* y, int64_t ldy, const uint8_t* next) {
    const int64_t nb = 8 * nsb;  // activation blocks per token
    constexpr int kZero = kThreeBit ? 4 : 0;
    // -kZero times one half's sum: the other half's int16 weighs 0 (sum[0] is the low one).
    const __m512i minus_zero_low = _mm512_set1_epi32(static_cast<uint16_t>(-kZero));
    const __m512i minus_zero_high = _mm512_set1_epi32(
        static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(-kZero)) << 16));
    __m512 acc[T], part[T];  // part: as in K4Group
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes) {
      const __m512 d = HalfScales(g);
      const __m512 dmin = kThreeBit ? _mm512_setzero_ps() : HalfScales(g + 32);
      __m512i u[4] = {};
      if constexpr (kThreeBit) Q3Scales(g, u);
      if constexpr (!kThreeBit && kSuperScale) {
        MinusMinSums<T>(g, dmin, x + 8 * sb, nb, part);
      } else {
        for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_ps();
      }
#pragma GCC unroll 8
      for (int b = 0; b < 8; ++b) {
        if (next)
          PrefetchStreamToL1(next + sb * kBlockBytes + b * kBlockBytes / 8, kBlockBytes / 8);
        const __m512i words = kThreeBit ? _mm512_setzero_si512() : Q2ScaleWords(g, b);
        __m512 scale[2];
        BlockScales(u, words, d, b, scale);
        const __m512i mins = _mm512_srli_epi16(words, 4);  // Q2_K, per-block scales
        __m512i q[8];
        Quants(g, b, q);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const Q8Block& xb = x[t * nb + 8 * sb + b];
          __m512i lo = kZero == 0 ? _mm512_setzero_si512() : ZeroPointStart(xb, minus_zero_low);
          __m512i hi = kZero == 0 ? _mm512_setzero_si512() : ZeroPointStart(xb, minus_zero_high);
          for (int k = 0; k < 4; ++k) {
            lo = DpbusdBroadcast(lo, q[k], xb.q + 4 * k);
            hi = DpbusdBroadcast(hi, q[k + 4], xb.q + 16 + 4 * k);
          }
          if constexpr (kSuperScale) {
            part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), scale[0], part[t]);
            part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), scale[1], part[t]);
          } else {
            const __m512 xd = _mm512_set1_ps(xb.d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(scale[0], xd), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(scale[1], xd), acc[t]);
            if constexpr (!kThreeBit) {
              const __m512i m = DpwssdBroadcast(_mm512_setzero_si512(), mins, xb.sum);
              acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin, xd), acc[t]);
            }
          }
        }
      }
      if constexpr (kSuperScale) {
        for (int t = 0; t < T; ++t)
          acc[t] = _mm512_fmadd_ps(part[t], _mm512_set1_ps(x[t * nb + 8 * sb].d), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
  }
};

// A tile of `left` (< kMaxTokens) tokens, with the count fixed at compile time.
template <typename G, int T = kMaxTokens - 1>
void Remainder(int left, const uint8_t* g, int64_t nb, const Q8Block* x, const SplitSums* xs,
               float* y, int64_t ldy, const uint8_t* next) {
  if constexpr (T > 0) {
    if (left == T) return G::template Tile<T>(g, nb, x, xs, y, ldy, next);
    Remainder<G, T - 1>(left, g, nb, x, xs, y, ldy, next);
  }
}

template <typename G>
void Products(const uint8_t* g, int64_t cols, const Q8Block* x, const SplitSums* xs, int64_t n,
              float* y, int64_t ldy, const uint8_t* next) {
  const int64_t nb = cols / G::kBlockElems;  // weight blocks per row
  const int64_t xb = cols / 32;              // Q8 blocks per token
  const int64_t xsb = cols / kSuperBlockValues;
  // What the tiles prefetch (prefetch.h): with one tile a group (up to kMaxTokens tokens) their
  // own stream kStreamPrefetchBytes ahead; with more, the next row group, which each of the
  // tiles over this group asks for.
  next = n <= kMaxTokens ? g + kStreamPrefetchBytes : next;
  int64_t t = 0;
  for (; t + kMaxTokens <= n; t += kMaxTokens) {
    G::template Tile<kMaxTokens>(g, nb, x + t * xb, xs ? xs + t * xsb : nullptr, y + t * ldy, ldy,
                                 next);
  }
  if (t < n) {
    Remainder<G>(static_cast<int>(n - t), g, nb, x + t * xb, xs ? xs + t * xsb : nullptr,
                 y + t * ldy, ldy, next);
  }
}

}  // namespace

GroupProductsFn Avx512VnniGroupProducts(DType t, ActivationScales scales) {
  const bool super = scales == ActivationScales::kPerSuperBlock;
  switch (t) {
    case DType::kQ8_0X16:
      return Products<Block32Group<Q8_0Unpack>>;
    case DType::kQ4_0X16:
      return Products<Block32Group<Q4_0Unpack>>;
    case DType::kMXFP4X16:
      return Products<Block32Group<Mxfp4Unpack>>;
    case DType::kQ5_0X16:
      return Products<Block32Group<Q5_0Unpack>>;
    case DType::kIQ4_NLX16:
      return Products<Block32Group<Iq4NlUnpack>>;
    case DType::kIQ4_XSX16:  // one kernel for either kind of activation scales
      return Products<Iq4XsGroup>;
    case DType::kQ4_1X16:
      return Products<Block32Group<Q4_1Unpack>>;
    case DType::kQ5_1X16:
      return Products<Block32Group<Q5_1Unpack>>;
    case DType::kQ4_KX16:
      return super ? Products<K4Group<false, true>> : Products<K4Group<false, false>>;
    case DType::kQ5_KX16:
      return super ? Products<K4Group<true, true>> : Products<K4Group<true, false>>;
    case DType::kQ6_KX16:
      return super ? Products<Q6_KGroup<true>> : Products<Q6_KGroup<false>>;
    case DType::kQ2_KX16:
      return super ? Products<LowBitKGroup<false, true>> : Products<LowBitKGroup<false, false>>;
    case DType::kQ3_KX16:
      return super ? Products<LowBitKGroup<true, true>> : Products<LowBitKGroup<true, false>>;
    default:
      return nullptr;
  }
}

}  // namespace moe::kernels
