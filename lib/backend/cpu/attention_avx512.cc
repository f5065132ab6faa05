// AVX-512 attention over a tile of query rows (tokens x heads of one KV group). Scores are made
// 16 cached positions at a time: each K row is widened to floats in registers and met there by
// up to 4 query rows (no copy through memory: that copy and its reloads were the most of a
// decode step's attention), each row's 16 partial-sum vectors are reduced together by a
// transpose tree (lane i = the sum of vector i; about 3 instructions a score instead of a full
// horizontal sum each), and the softmax uses a vector exp. Every score is summed in the same order
// whatever the tile holds, so a token gets the same result alone (decode) as in a prompt batch.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lib/backend/cpu/attention_kernels.h"
#include "lib/backend/cpu/exp_avx512.h"

namespace moe::kernels {
namespace {

constexpr int kMaxChunks = 16;  // head_dim <= 256

// Values 16c .. 16c+15 of a cached row of type T as floats. Q8_0: half c % 2 of block c / 2 (a
// half-precision scale, then 32 signed bytes), each value its byte times the scale. The type is a
// template argument: read at run time, its tests and the branches around them were a third of a
// decode step's attention instructions.
template <DType T>
inline __m512 LoadRow(const uint8_t* row, int c) {
  if constexpr (T == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + c));
  } else if constexpr (T == DType::kQ8_0) {
    const uint8_t* block = row + (c / 2) * 34;
    uint16_t d;
    std::memcpy(&d, block, 2);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + (c % 2) * 16));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(_cvtsh_ss(d)));
  } else {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * c);
  }
}

// Folds pairs: lanes [0, 8) of the result come from a, [8, 16) from b, each the sum of the two
// lanes `lo` and `hi` pick.
inline __m512 FoldPair(__m512 a, __m512 b, __m512i lo, __m512i hi) {
  return _mm512_add_ps(_mm512_permutex2var_ps(a, lo, b), _mm512_permutex2var_ps(a, hi, b));
}

// The index vectors of fold level L (1 to 4) for FoldPair: level 1 folds pairs of whole
// vectors (8 lanes each from a and b), level 4 pairs of lanes.
template <int L>
inline void FoldLanes(__m512i& lo, __m512i& hi) {
  if constexpr (L == 1) {
    lo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    hi = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  } else if constexpr (L == 2) {
    lo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    hi = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  } else if constexpr (L == 3) {
    lo = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    hi = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  } else {
    lo = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    hi = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  }
}

// Lane i of the result = the sum of the 16 lanes of v[i].
inline __m512 SumEach16(__m512 v[16]) {
  __m512i lo1, hi1, lo2, hi2, lo3, hi3, lo4, hi4;
  FoldLanes<1>(lo1, hi1);
  FoldLanes<2>(lo2, hi2);
  FoldLanes<3>(lo3, hi3);
  FoldLanes<4>(lo4, hi4);
  __m512 w[8], x[4], y[2];
  for (int j = 0; j < 8; ++j) w[j] = FoldPair(v[2 * j], v[2 * j + 1], lo1, hi1);  // 8 lanes each
  for (int j = 0; j < 4; ++j) x[j] = FoldPair(w[2 * j], w[2 * j + 1], lo2, hi2);  // 4 lanes
  for (int j = 0; j < 2; ++j) y[j] = FoldPair(x[2 * j], x[2 * j + 1], lo3, hi3);  // 2 lanes
  return FoldPair(y[0], y[1], lo4, hi4);
}

// Scores of R query rows against 16 cached rows, with no copy of the rows: each K row is
// widened in registers and met by the R rows at once, and the partial-sum vectors are folded
// as soon as a pair is complete (a depth-first walk of SumEach16's tree, so every score gets
// exactly SumEach16's sums; only about log2(16) vectors per row are alive at a time). Lane i of
// out[r] = q[r] . K row i (a null row: not seen, zero; kAllSeen: none is null, as in every block
// but a window's or the cache's first and last).
template <int C, int R, DType T, bool kAllSeen>
struct ScoreRows {
  const uint8_t* const* k;  // [16]
  const float* const* q;    // [R]

  // Inlined whole: GCC left the leaves as calls once the cache type became a template argument,
  // which halved the kernel's speed.
  template <int N>
  [[gnu::always_inline]] void Fold(int i0, __m512 out[R]) const {
    if constexpr (N == 1) {
      __m512 kv[C];
      for (int c = 0; c < C; ++c)
        kv[c] = kAllSeen || k[i0] != nullptr ? LoadRow<T>(k[i0], c) : _mm512_setzero_ps();
      for (int r = 0; r < R; ++r) {
        out[r] = _mm512_mul_ps(_mm512_loadu_ps(q[r]), kv[0]);
        for (int c = 1; c < C; ++c)
          out[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q[r] + 16 * c), kv[c], out[r]);
      }
    } else {
      constexpr int kLevel = N == 2 ? 1 : N == 4 ? 2 : N == 8 ? 3 : 4;
      __m512i lo, hi;
      FoldLanes<kLevel>(lo, hi);
      __m512 a[R], b[R];
      Fold<N / 2>(i0, a);
      Fold<N / 2>(i0 + N / 2, b);
      for (int r = 0; r < R; ++r) out[r] = FoldPair(a[r], b[r], lo, hi);
    }
  }
};

// Scores of query rows [r0, r0 + R) for the block of 16 positions whose K rows are krow, into
// their rows of scores at column col.
template <int C, int R, DType T, bool kAllSeen>
inline void ScoreBlock(const uint8_t* const* krow, const float* const* q, float scale,
                       float* scores, int64_t ld, int64_t r0, int64_t col) {
  __m512 out[R];
  ScoreRows<C, R, T, kAllSeen>{krow, q + r0}.template Fold<16>(0, out);
  for (int r = 0; r < R; ++r)
    _mm512_storeu_ps(scores + (r0 + r) * ld + col, _mm512_mul_ps(out[r], _mm512_set1_ps(scale)));
}

// The scores of every query row for one block of 16 positions, as many rows at once as the
// registers hold beside a widened K row.
template <int C, DType T, bool kAllSeen>
inline void ScoreBlockRows(const uint8_t* const* krow, const float* const* q, float scale,
                           float* scores, int64_t ld, int64_t rows, int64_t col) {
  constexpr int kRows = C <= 4 ? 4 : 2;
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows)
    ScoreBlock<C, kRows, T, kAllSeen>(krow, q, scale, scores, ld, r, col);
  for (; r + 2 <= rows; r += 2) ScoreBlock<C, 2, T, kAllSeen>(krow, q, scale, scores, ld, r, col);
  for (; r < rows; ++r) ScoreBlock<C, 1, T, kAllSeen>(krow, q, scale, scores, ld, r, col);
}

// Output sums of query rows [r0, r0 + NR), over the positions [first, len) any of them sees
// (rows' weights zero outside their own), each in registers; NR a template argument so that they
// stay there.
template <int C, DType T, int NR>
inline void OutputRows(const AttentionHeads& a, const KvRowPrefetch& prefetch, int chunks,
                       const float* scores, int64_t ld, int64_t begin, int64_t r0, int64_t first,
                       int64_t len, float* const* out) {
  const int n = C > 0 ? C : chunks;
  __m512 acc[NR][kMaxChunks];
  for (int g = 0; g < NR; ++g)
    for (int c = 0; c < n; ++c) acc[g][c] = _mm512_setzero_ps();
  ForEachKvRow(a, a.v, first, len, [&](int64_t p, const uint8_t* v_row) {
    const uint8_t* row = prefetch.VRow(p, v_row, len);
    __m512 v[kMaxChunks];
    for (int c = 0; c < n; ++c) v[c] = LoadRow<T>(row, c);
    for (int g = 0; g < NR; ++g) {
      const __m512 w = _mm512_set1_ps(scores[(r0 + g) * ld + (p - begin)]);
      for (int c = 0; c < n; ++c) acc[g][c] = _mm512_fmadd_ps(w, v[c], acc[g][c]);
    }
  });
  for (int g = 0; g < NR; ++g)
    for (int c = 0; c < n; ++c) _mm512_storeu_ps(out[g] + 16 * c, acc[g][c]);
}

// C: head_dim / 16, fixed for the common head sizes so the vectors stay in registers; 0 = read
// at run time. T: the cache's type.
template <int C, DType T>
void Attend(const AttentionHeads& a) {
  const int chunks = C > 0 ? C : static_cast<int>(a.head_dim / 16);
  const int64_t hd = a.head_dim;
  const QueryRows<16> qr(a);
  const int64_t rows = qr.rows, span = qr.span, seen_from = qr.seen_from, begin = qr.begin,
                ld = qr.ld;
  thread_local std::vector<float> scores, kbuf;
  if (scores.capacity() < 16384) scores.reserve(16384);  // grows only with long contexts
  scores.resize(rows * ld);
  kbuf.resize(16 * hd);
  thread_local std::vector<const float*> q_rows;
  q_rows.resize(rows);
  for (int64_t r = 0; r < rows; ++r) q_rows[r] = a.q + qr.Offset(r);
  const KvRowPrefetch prefetch(a, seen_from, span);
  for (int64_t p0 = begin; p0 < span; p0 += 16) {
    // Only positions some row sees have a row: a paged table ends at the span, and a sliding
    // window's blocks before the first row's window may be given back (PagedKvCache).
    const uint8_t* krow[16];
    for (int i = 0; i < 16; ++i) {
      const bool seen = p0 + i >= seen_from && p0 + i < span;
      krow[i] = seen ? prefetch.KRow(p0 + i) : nullptr;
    }
    if constexpr (C > 0) {
      const int64_t col = p0 - begin;
      if (p0 >= seen_from && p0 + 16 <= span) {
        ScoreBlockRows<C, T, true>(krow, q_rows.data(), a.scale, scores.data(), ld, rows, col);
      } else {
        ScoreBlockRows<C, T, false>(krow, q_rows.data(), a.scale, scores.data(), ld, rows, col);
      }
      continue;
    }
    // Head sizes without a fixed chunk count: the block's K rows as floats, once for every row
    // (zeros where not seen).
    for (int i = 0; i < 16; ++i) {
      for (int c = 0; c < chunks; ++c) {
        _mm512_storeu_ps(kbuf.data() + i * hd + 16 * c,
                         krow[i] ? LoadRow<T>(krow[i], c) : _mm512_setzero_ps());
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* q = q_rows[r];
      __m512 qv[kMaxChunks];
      for (int c = 0; c < chunks; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
      __m512 part[16];
      for (int i = 0; i < 16; ++i) {
        const float* k = kbuf.data() + i * hd;
        part[i] = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
        for (int c = 1; c < chunks; ++c)
          part[i] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + 16 * c), part[i]);
      }
      _mm512_storeu_ps(scores.data() + r * ld + (p0 - begin),
                       _mm512_mul_ps(SumEach16(part), _mm512_set1_ps(a.scale)));
    }
  }
  qr.SoftmaxEach(scores.data(), SoftmaxRowAvx512);
  // Output sums: up to 4 rows at a time in registers, over the positions any of them sees.
  qr.ForEachFour([&](auto nr, int64_t r0, int64_t first, int64_t len, float* const* out) {
    OutputRows<C, T, decltype(nr)::value>(a, prefetch, chunks, scores.data(), ld, begin, r0, first,
                                          len, out);
  });
}

}  // namespace

void SoftmaxRowAvx512(float* s, int64_t len, float sink) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int64_t p = 0;
  for (; p + 16 <= len; p += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + p));
  float max_s = std::max(_mm512_reduce_max_ps(vmax), sink);
  for (; p < len; ++p) max_s = std::max(max_s, s[p]);
  const __m512 m = _mm512_set1_ps(max_s);
  __m512 vsum = _mm512_setzero_ps();
  for (p = 0; p < len; p += 16) {
    const __mmask16 k = len - p >= 16 ? 0xffff : static_cast<__mmask16>((1u << (len - p)) - 1);
    const __m512 e = ExpAvx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + p), m));
    _mm512_mask_storeu_ps(s + p, k, e);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(k, e));
  }
  // No sink: exp(-inf) adds an exact zero.
  const __m512 inv = _mm512_set1_ps(1.0f / (_mm512_reduce_add_ps(vsum) + std::exp(sink - max_s)));
  for (p = 0; p < len; p += 16) {
    const __mmask16 k = len - p >= 16 ? 0xffff : static_cast<__mmask16>((1u << (len - p)) - 1);
    _mm512_mask_storeu_ps(s + p, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + p), inv));
  }
}

void SoftmaxRowsAvx512(float* scores, int64_t rows, int64_t len) {
  for (int64_t g = 0; g < rows; ++g) SoftmaxRowAvx512(scores + g * len, len, -INFINITY);
}

template <DType T>
AttendFn Avx512AttendOf(int64_t head_dim) {
  switch (head_dim) {
    case 64:
      return Attend<4, T>;
    case 128:
      return Attend<8, T>;
    default:
      return Attend<0, T>;
  }
}

AttendFn Avx512Attend(DType kv_type, int64_t head_dim) {
  if (head_dim % 16 != 0 || head_dim / 16 > kMaxChunks || head_dim == 0) return nullptr;
  switch (kv_type) {
    case DType::kF32:
      return Avx512AttendOf<DType::kF32>(head_dim);
    case DType::kF16:
      return Avx512AttendOf<DType::kF16>(head_dim);
    case DType::kQ8_0:
      return Avx512AttendOf<DType::kQ8_0>(head_dim);
    default:
      return nullptr;
  }
}

}  // namespace moe::kernels
