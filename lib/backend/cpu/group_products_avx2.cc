// AVX2 kernels for the row-group layouts. A 64-byte lane vector is two 256-bit halves of 8 rows
// each, run one after the other; vpmaddubsw + vpmaddwd stand in for vpdpbusd. The 4- to 6-bit
// quants fit vpmaddubsw's 16-bit pair sums as they are (at most 2 x 63 x 127 < 2^15); Q8_0's,
// stored as q + 128, would not, so its kernel multiplies |q| by the activations with q's sign.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "lib/backend/cpu/group_products.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/backend/cpu/prefetch.h"

namespace moe::kernels {
namespace {

constexpr int kMaxTokens = 4;

inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// acc + four u8 x s8 products per 32-bit lane.
inline __m256i Dot4(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

inline __m256i LoadHalf(const uint8_t* lane_vector, int half) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lane_vector + 32 * half));
}

inline __m256 HalfScales8(const uint8_t* p16, int half) {  // 8 of the 16 rows' f16 scales
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p16 + 16 * half)));
}

inline int QuantSum(const Q8Block& b) { return b.sum[0] + b.sum[1]; }

// y[t * ldy ..] = (or +=, for the later block chunks of a row) the tile's 8 sums per token.
template <int T>
inline void Store(const __m256 acc[T], float* y, int64_t ldy, bool add) {
  for (int t = 0; t < T; ++t) {
    float* o = y + t * ldy;
    _mm256_storeu_ps(o, add ? _mm256_add_ps(_mm256_loadu_ps(o), acc[t]) : acc[t]);
  }
}

// acc + the products of quants of at most kBits bits with activation bytes over the n lane
// groups q[k] (quants 4k..4k+3 of the 8 rows) and xq + 4k. vpmaddubsw's 16-bit pair sums are
// exact for such quants (at most 2 x (2^kBits - 1) x 127), so as many of them as cannot
// overflow 16 bits are added before one vpmaddwd widens them: for 4-bit quants one widening per
// block instead of eight, the multiply pipes' scarcest work.
template <int kBits>
inline __m256i NarrowSums(const __m256i* q, const int8_t* xq, int n, __m256i acc) {
  constexpr int kPerWiden = 32767 / (2 * ((1 << kBits) - 1) * 127);
  static_assert(kPerWiden >= 1);
  for (int k0 = 0; k0 < n; k0 += kPerWiden) {
    __m256i s = _mm256_maddubs_epi16(q[k0], Broadcast4(xq + 4 * k0));
    for (int k = k0 + 1; k < std::min(n, k0 + kPerWiden); ++k)
      s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[k], Broadcast4(xq + 4 * k)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1)));
  }
  return acc;
}

// Q8_0X16: 8 lane vectors of q + 128, then 16 f16 scales (544 bytes a block).
struct Q8_0Half {
  static constexpr int64_t kBlockElems = 32, kBlockBytes = 544;
  template <int T>
  static void Tile(const uint8_t* g, int half, int64_t nb, const Q8Block* x, int64_t xs, float* y,
                   int64_t ldy, bool add) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
      __m256i q[8], mag[8];  // signed quants and their magnitudes (|-128| = 128 fits a u8)
      for (int k = 0; k < 8; ++k) {
        q[k] = _mm256_xor_si256(LoadHalf(g + 64 * k, half), flip);
        mag[k] = _mm256_abs_epi8(q[k]);
      }
      const __m256 d = HalfScales8(g + 512, half);
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * xs + b];
        __m256i s = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k)  // |q| x (x with q's sign): pair sums <= 2 x 128 x 127
          s = Dot4(s, mag[k], _mm256_sign_epi8(Broadcast4(xb.q + 4 * k), q[k]));
        acc[t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
      }
    }
    Store<T>(acc, y, ldy, add);
  }
};

// Q4_0X16: 4 lane vectors of nibbles, then 16 f16 scales (288 bytes a block); zero point 8.
struct Q4_0Half {
  static constexpr int64_t kBlockElems = 32, kBlockBytes = 288;
  template <int T>
  static void Tile(const uint8_t* g, int half, int64_t nb, const Q8Block* x, int64_t xs, float* y,
                   int64_t ldy, bool add) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
      __m256i q[8];
      for (int k = 0; k < 4; ++k) {
        const __m256i raw = LoadHalf(g + 64 * k, half);
        q[k] = _mm256_and_si256(raw, m4);
        q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      }
      const __m256 d = HalfScales8(g + 256, half);
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * xs + b];
        const __m256i s = NarrowSums<4>(q, xb.q, 8, _mm256_set1_epi32(-8 * QuantSum(xb)));
        acc[t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
      }
    }
    Store<T>(acc, y, ldy, add);
  }
};

// MXFP4X16: 4 lane vectors of codes, then 16 E8M0 scale bytes (272 bytes a block). A byte
// shuffle turns each code into twice its E2M1 value plus 12 (0..24, unsigned for vpmaddubsw);
// the 12 comes back off through the activations' quant sum, as Q4_0's zero point does.
struct Mxfp4Half {
  static constexpr int64_t kBlockElems = 32, kBlockBytes = 272;
  static constexpr int kZero = kMxfp4Zero;
  // 2^(e - 128) for 8 rows' scale bytes: e << 23 is 2^(e - 127) as a float for e >= 1 (e = 1
  // the smallest normal), halved exactly; e = 0 has no such bit pattern and is set apart.
  static __m256 Scales8(const uint8_t* e8, int half) {
    const __m256i e =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e8 + 8 * half)));
    const __m256 scaled =
        _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(e, 23)), _mm256_set1_ps(0.5f));
    const __m256 zero_exponent = _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    return _mm256_blendv_ps(scaled, _mm256_set1_ps(0x1p-128f), zero_exponent);
  }
  template <int T>
  static void Tile(const uint8_t* g, int half, int64_t nb, const Q8Block* x, int64_t xs, float* y,
                   int64_t ldy, bool add) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4ShiftedValues)));
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
      __m256i q[8];
      for (int k = 0; k < 4; ++k) {
        const __m256i raw = LoadHalf(g + 64 * k, half);
        q[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, m4));
        q[k + 4] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
      }
      const __m256 d = Scales8(g + 256, half);
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * xs + b];
        const __m256i s = NarrowSums<5>(q, xb.q, 8, _mm256_set1_epi32(-kZero * QuantSum(xb)));
        acc[t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
      }
    }
    Store<T>(acc, y, ldy, add);
  }
};

// Q4_KX16 / Q5_KX16 (kFifthBit): as the AVX-512 K4Group, 8 rows at a time.
template <bool kFifthBit>
struct K4Half {
  static constexpr int64_t kBlockElems = 256, kBlockBytes = kFifthBit ? 2816 : 2304;
  static constexpr int64_t kNibbles = kFifthBit ? 768 : 256;
  template <int T>
  static void Tile(const uint8_t* g, int half, int64_t nsb, const Q8Block* x, int64_t xs, float* y,
                   int64_t ldy, bool add) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    const __m256i m6 = _mm256_set1_epi32(0x3f3f3f3f), m2 = _mm256_set1_epi32(0x03030303);
    const __m256i low4 = _mm256_set1_epi32(0x0f0f0f0f), byte = _mm256_set1_epi32(0xff);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes) {
      const __m256 d = HalfScales8(g, half), dmin = HalfScales8(g + 32, half);
      const __m256i u0 = LoadHalf(g + 64, half), u1 = LoadHalf(g + 128, half),
                    u2 = LoadHalf(g + 192, half);
      const __m256i sc[2] = {
          _mm256_and_si256(u0, m6),
          _mm256_or_si256(_mm256_and_si256(u2, low4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), m2), 4))};
      const __m256i mn[2] = {
          _mm256_and_si256(u1, m6),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), low4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), m2), 4))};
      for (int c = 0; c < 4; ++c) {
        const uint8_t* nibbles = g + kNibbles + 512 * c;
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * c + h, shift = 8 * (j % 4);
          const __m256 scale = _mm256_mul_ps(
              d, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(sc[j / 4], shift), byte)));
          const __m256 min = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_and_si256(
                                                     _mm256_srli_epi32(mn[j / 4], shift), byte)));
          __m256i q[8];
          for (int k = 0; k < 8; ++k) {
            const __m256i raw = LoadHalf(nibbles + 64 * k, half);
            q[k] = _mm256_and_si256(h ? _mm256_srli_epi16(raw, 4) : raw, m4);
            if constexpr (kFifthBit) {
              const __m256i hb = LoadHalf(g + 256 + 64 * k, half);
              const __m256i moved =
                  j <= 4 ? _mm256_slli_epi16(hb, 4 - j) : _mm256_srli_epi16(hb, j - 4);
              q[k] = _mm256_or_si256(q[k], _mm256_and_si256(moved, bit4));
            }
          }
          for (int t = 0; t < T; ++t) {
            const Q8Block& xb = x[t * xs + 8 * sb + j];
            const __m256i s = NarrowSums < kFifthBit ? 5 : 4 > (q, xb.q, 8, _mm256_setzero_si256());
            const __m256 xd = _mm256_set1_ps(xb.d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(scale, xd), acc[t]);
            acc[t] = _mm256_fnmadd_ps(min, _mm256_set1_ps(xb.dsum), acc[t]);
          }
        }
      }
    }
    Store<T>(acc, y, ldy, add);
  }
};

// Q6_KX16: as the AVX-512 Q6_KGroup (its batch tile), 8 rows at a time.
struct Q6_KHalf {
  static constexpr int64_t kBlockElems = 256, kBlockBytes = 3360;
  template <int T>
  static void Tile(const uint8_t* g, int half, int64_t nsb, const Q8Block* x, int64_t xs, float* y,
                   int64_t ldy, bool add) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes) {
      const __m256 d = HalfScales8(g, half);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* quants = g + 288 + 1536 * h;
        for (int s = 0; s < 4; ++s) {
          __m256 scale[2];
          for (int e = 0; e < 2; ++e) {
            const int i = 8 * h + 2 * s + e;
            const __m256i v = LoadHalf(g + 32 + 64 * (i / 4), half);
            scale[e] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_srai_epi32(
                                            _mm256_slli_epi32(v, 24 - 8 * (i % 4)), 24)));
          }
          __m256i q[8];
          for (int k = 0; k < 8; ++k) {
            const __m256i l = LoadHalf(quants + 192 * k + 64 * (s & 1), half);
            const __m256i nib = _mm256_and_si256(s < 2 ? l : _mm256_srli_epi16(l, 4), m4);
            __m256i hb = LoadHalf(quants + 192 * k + 128, half);
            if (s < 2) hb = _mm256_slli_epi16(hb, 4 - 2 * s);
            if (s == 3) hb = _mm256_srli_epi16(hb, 2);
            q[k] = _mm256_or_si256(nib, _mm256_and_si256(hb, m30));
          }
          for (int t = 0; t < T; ++t) {
            const Q8Block& xb = x[t * xs + 8 * sb + 4 * h + s];
            const __m256i lo = NarrowSums<6>(q, xb.q, 4, _mm256_set1_epi32(-32 * xb.sum[0]));
            const __m256i hi =
                NarrowSums<6>(q + 4, xb.q + 16, 4, _mm256_set1_epi32(-32 * xb.sum[1]));
            const __m256 xd = _mm256_set1_ps(xb.d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(scale[0], xd), acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(scale[1], xd), acc[t]);
          }
        }
      }
    }
    Store<T>(acc, y, ldy, add);
  }
};

// Q2_KX16 / Q3_KX16 (kThreeBit): as the AVX-512 LowBitKGroup with a scale per activation block,
// 8 rows at a time.
template <bool kThreeBit>
struct LowBitKHalf {
  static constexpr int64_t kBlockElems = 256, kBlockBytes = kThreeBit ? 1760 : 1344;
  static constexpr int64_t kLaneGroups = kThreeBit ? 224 : 320;
  static constexpr int64_t kLaneGroupBytes = kThreeBit ? 192 : 128;
  static constexpr int kZero = kThreeBit ? 4 : 0;

  // Q2_K: the scale bytes of block b's two 16-quant groups as int16 words per row.
  static __m256i Q2ScaleWords(const uint8_t* g, int half, int b) {
    const int i = 2 * (b % 2);
    const __m256i pick = _mm256_broadcastsi128_si256(_mm_setr_epi8(
        i, -1, i + 1, -1, 4 + i, -1, 5 + i, -1, 8 + i, -1, 9 + i, -1, 12 + i, -1, 13 + i, -1));
    return _mm256_shuffle_epi8(LoadHalf(g + 64 + 64 * (b / 2), half), pick);
  }

  // Q3_K: the sixteen scales per row, each byte (scale + 32) ^ 32 (a signed 6-bit field).
  static void Q3Scales(const uint8_t* g, int half, __m256i u[4]) {
    const __m256i a0 = LoadHalf(g + 32, half), a1 = LoadHalf(g + 96, half),
                  a2 = LoadHalf(g + 160, half);
    const __m256i low4 = _mm256_set1_epi32(0x0f0f0f0f), low2 = _mm256_set1_epi32(0x03030303);
    const __m256i bits45 = _mm256_set1_epi32(0x30303030), flip = _mm256_set1_epi32(0x20202020);
    const __m256i high[4] = {_mm256_slli_epi32(_mm256_and_si256(a2, low2), 4),
                             _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a2, 2), low2), 4),
                             _mm256_and_si256(a2, bits45),
                             _mm256_and_si256(_mm256_srli_epi32(a2, 2), bits45)};
    const __m256i low[4] = {_mm256_and_si256(a0, low4), _mm256_and_si256(a1, low4),
                            _mm256_and_si256(_mm256_srli_epi32(a0, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi32(a1, 4), low4)};
    for (int i = 0; i < 4; ++i) u[i] = _mm256_xor_si256(_mm256_or_si256(low[i], high[i]), flip);
  }

  template <int T>
  static void Tile(const uint8_t* g, int half, int64_t nsb, const Q8Block* x, int64_t xs, float* y,
                   int64_t ldy, bool add) {
    const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi32(0x0f);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb, g += kBlockBytes) {
      const __m256 d = HalfScales8(g, half);
      const __m256 dmin = kThreeBit ? _mm256_setzero_ps() : HalfScales8(g + 32, half);
      __m256i u[4] = {};
      if constexpr (kThreeBit) Q3Scales(g, half, u);
      for (int b = 0; b < 8; ++b) {
        __m256 scale[2];
        __m256i mins = _mm256_setzero_si256();
        if constexpr (kThreeBit) {
          for (int e = 0; e < 2; ++e) {
            const int i = 2 * b + e;
            scale[e] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_srai_epi32(
                                            _mm256_slli_epi32(u[i / 4], 26 - 8 * (i % 4)), 26)));
          }
        } else {
          const __m256i words = Q2ScaleWords(g, half, b);
          scale[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(words, m4)));
          scale[1] = _mm256_mul_ps(
              d, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(words, 16), m4)));
          mins = _mm256_srli_epi16(words, 4);
        }
        const int h = b / 4, s = b % 4;
        __m256i q[8];
        for (int k = 0; k < 8; ++k) {
          const uint8_t* lanes = g + kLaneGroups + kLaneGroupBytes * k;
          const __m256i raw = LoadHalf(lanes + 64 * (h + (kThreeBit ? 1 : 0)), half);
          q[k] = _mm256_and_si256(s ? _mm256_srli_epi16(raw, 2 * s) : raw, m2);
          if constexpr (kThreeBit) {  // bit b of the high-bit byte as bit 2
            const __m256i hb = LoadHalf(lanes, half);
            const __m256i moved =
                b <= 2 ? _mm256_slli_epi16(hb, 2 - b) : _mm256_srli_epi16(hb, b - 2);
            q[k] = _mm256_or_si256(q[k], _mm256_and_si256(moved, _mm256_set1_epi8(4)));
          }
        }
        for (int t = 0; t < T; ++t) {
          const Q8Block& xb = x[t * xs + 8 * sb + b];
          constexpr int kBits = kThreeBit ? 3 : 2;
          const __m256i lo = NarrowSums<kBits>(q, xb.q, 4, _mm256_set1_epi32(-kZero * xb.sum[0]));
          const __m256i hi =
              NarrowSums<kBits>(q + 4, xb.q + 16, 4, _mm256_set1_epi32(-kZero * xb.sum[1]));
          const __m256 xd = _mm256_set1_ps(xb.d);
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(scale[0], xd), acc[t]);
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(scale[1], xd), acc[t]);
          if constexpr (!kThreeBit) {
            int32_t sums;
            std::memcpy(&sums, xb.sum, 4);
            const __m256i m = _mm256_madd_epi16(mins, _mm256_set1_epi32(sums));
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, xd), acc[t]);
          }
        }
      }
    }
    Store<T>(acc, y, ldy, add);
  }
};

template <typename G, int T = kMaxTokens - 1>
void Remainder(int left, const uint8_t* g, int half, int64_t nb, const Q8Block* x, int64_t xs,
               float* y, int64_t ldy, bool add) {
  if constexpr (T > 0) {
    if (left == T) return G::template Tile<T>(g, half, nb, x, xs, y, ldy, add);
    Remainder<G, T - 1>(left, g, half, nb, x, xs, y, ldy, add);
  }
}

// The two 8-row halves of a block share its cache lines: a row is taken in chunks of about 4 KB
// that both halves read while they are in L1, instead of streaming the whole group twice.
template <typename G>
void Products(const uint8_t* g, int64_t cols, const Q8Block* x, const SplitSums* /*xs*/, int64_t n,
              float* y, int64_t ldy, const uint8_t* next) {
  const int64_t nb = cols / G::kBlockElems, xs = cols / 32;
  const int64_t q8_per_block = G::kBlockElems / 32;
  const int64_t chunk = std::max<int64_t>(1, 4096 / G::kBlockBytes);
  for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
    const int64_t nbc = std::min(chunk, nb - b0);
    const uint8_t* gc = g + b0 * G::kBlockBytes;
    const Q8Block* xc = x + b0 * q8_per_block;
    const bool add = b0 > 0;
    if (n < kPrefetchTokens) {
      // The stream's next chunk (the next group's first past the last: a prefetch never faults).
      PrefetchToL1(gc + nbc * G::kBlockBytes, chunk * G::kBlockBytes);
    } else if (next) {
      PrefetchToL2(next + b0 * G::kBlockBytes, nbc * G::kBlockBytes);
    }
    for (int half = 0; half < 2; ++half) {
      int64_t t = 0;
      for (; t + kMaxTokens <= n; t += kMaxTokens)
        G::template Tile<kMaxTokens>(gc, half, nbc, xc + t * xs, xs, y + t * ldy + 8 * half, ldy,
                                     add);
      if (t < n)
        Remainder<G>(static_cast<int>(n - t), gc, half, nbc, xc + t * xs, xs,
                     y + t * ldy + 8 * half, ldy, add);
    }
  }
}

}  // namespace

GroupProductsFn Avx2GroupProducts(DType t) {
  switch (t) {
    case DType::kQ8_0X16:
      return Products<Q8_0Half>;
    case DType::kQ4_0X16:
      return Products<Q4_0Half>;
    case DType::kQ4_KX16:
      return Products<K4Half<false>>;
    case DType::kQ5_KX16:
      return Products<K4Half<true>>;
    case DType::kQ6_KX16:
      return Products<Q6_KHalf>;
    case DType::kMXFP4X16:
      return Products<Mxfp4Half>;
    case DType::kQ2_KX16:
      return Products<LowBitKHalf<false>>;
    case DType::kQ3_KX16:
      return Products<LowBitKHalf<true>>;
    default:
      return nullptr;
  }
}

}  // namespace moe::kernels
