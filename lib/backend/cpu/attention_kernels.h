// Attention of a few consecutive query positions over their cached keys and values, for all the
// query heads that share one KV head (grouped-query attention): each cached row is read once for
// every head of the group and every token of the tile.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "lib/backend/backend.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/prefetch.h"
#include "lib/backend/kv_core.h"
#include "lib/base/dtype.h"

namespace moe {

struct AttentionHeads {
  const float* q;  // per token, group x head_dim, head after head
  float* out;      // per token, group x head_dim
  int64_t group, head_dim;
  int64_t len;  // cached positions the first token attends to: 0 .. len-1
  // Tokens at consecutive positions: token i attends to len + i rows, its q and out start
  // i * q_stride floats on.
  int64_t tokens = 1;
  int64_t q_stride = 0;
  const uint8_t* k;  // row p of this KV head at k + KvRowOffset(p) (k + p * row_bytes unpaged)
  const uint8_t* v;
  int64_t row_bytes;
  DType dtype;      // F32, F16 or Q8_0
  float scale;      // 1 / sqrt(head_dim)
  KvPaging paging;  // where row p is (lib/backend/backend.h)
  // Only the last `window` positions of each token's range (0: all), or with `chunked` those of
  // its chunk of `window` positions; one sink logit per head of the group (null: none), joining
  // each softmax's normalisation without a value.
  int64_t window = 0;
  bool chunked = false;
  const float* sinks = nullptr;

  int64_t KvRowOffset(int64_t p) const { return paging.RowOffset(p, row_bytes); }
  // The first position a token attending to `len` positions (0 .. len - 1) sees.
  int64_t FirstSeen(int64_t len) const { return AttendedSpan(len - 1, window, chunked).first; }
};

// fn(p, row) for each position p in [begin, end) with its row in `base` (a.k or a.v), walking
// each block's rows by pointer: the inner loop is the contiguous cache's, whatever the paging.
template <typename Fn>
inline void ForEachKvRow(const AttentionHeads& a, const uint8_t* base, int64_t begin, int64_t end,
                         Fn&& fn) {
  for (int64_t p0 = begin; p0 < end;) {
    const int64_t stop =
        a.paging.blocks == nullptr
            ? end
            : std::min(end, ((p0 >> a.paging.block_shift) + 1) << a.paging.block_shift);
    const uint8_t* row = base + a.KvRowOffset(p0);
    for (int64_t p = p0; p < stop; ++p, row += a.row_bytes) fn(p, row);
    p0 = stop;
  }
}

// A call's query rows and their scores, laid out in blocks of kBlock positions (the vector
// kernels' width): row r is head r % group of token r / group, and attends to positions
// [First(r), Len(r)) — all before it, or its window's or chunk's —; its scores are row r of a
// rows x ld matrix whose column j is position begin + j, begin the start of the first block
// any row sees.
template <int kBlock>
struct QueryRows {
  explicit QueryRows(const AttentionHeads& heads)
      : a(heads),
        rows(heads.tokens * heads.group),
        span(heads.len + heads.tokens - 1),
        seen_from(First(0)),
        begin(seen_from / kBlock * kBlock),
        ld((span - begin + kBlock - 1) / kBlock * kBlock) {}

  int64_t Len(int64_t r) const { return a.len + r / a.group; }
  int64_t First(int64_t r) const { return a.FirstSeen(Len(r)); }
  // Row r's offset in q and out.
  int64_t Offset(int64_t r) const {
    return (r / a.group) * a.q_stride + (r % a.group) * a.head_dim;
  }

  // Each row's scores become its softmax over the positions it sees, with its head's sink
  // (softmax(s, n, sink), -inf: none); the other columns weigh nothing.
  template <typename Softmax>
  void SoftmaxEach(float* scores, Softmax&& softmax) const {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t first = First(r) - begin, len = Len(r) - begin;
      float* s = scores + r * ld;
      softmax(s + first, len - first, a.sinks ? a.sinks[r % a.group] : -INFINITY);
      std::fill(s, s + first, 0.0f);
      std::fill(s + len, s + ld, 0.0f);
    }
  }

  // fn(nr, r0, first, len, out) for the query rows [r0, r0 + nr), four at a time (the output
  // sums a kernel keeps in registers), nr a std::integral_constant: the positions [first, len)
  // any of them sees, and their output rows.
  template <typename Fn>
  void ForEachFour(Fn&& fn) const {
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
      const int64_t nr = std::min<int64_t>(4, rows - r0);
      float* out[4];
      for (int64_t g = 0; g < nr; ++g) out[g] = a.out + Offset(r0 + g);
      const int64_t first = First(r0), len = Len(r0 + nr - 1);
      switch (nr) {
        case 4:
          fn(std::integral_constant<int, 4>{}, r0, first, len, out);
          break;
        case 3:
          fn(std::integral_constant<int, 3>{}, r0, first, len, out);
          break;
        case 2:
          fn(std::integral_constant<int, 2>{}, r0, first, len, out);
          break;
        default:
          fn(std::integral_constant<int, 1>{}, r0, first, len, out);
      }
    }
  }

  const AttentionHeads& a;
  const int64_t rows;       // query rows, token after token
  const int64_t span;       // what the last token attends to
  const int64_t seen_from;  // the first position any row sees
  const int64_t begin, ld;
};

// While a kernel scores position p it asks for p's V row (the output sums read it after the
// softmax) and for the K row 16 positions on. A paged cache's rows lie in scattered blocks (and
// until the caches kept each KV head's rows apart, a head's row was a few lines of a row holding
// every head), so the hardware prefetcher alone left the kernel waiting on these lines: 8
// sequences decoding together (Q4_K_M bench model, F16 cache, 2 threads) spent ~3.7 ms of a 12.7
// ms step in attention without this, ~2.6 ms with it. The V rows are asked for only while a
// head's V slice stays small beside the K rows streaming through the same caches: with one
// sequence at 4,096 positions (512 KiB of V a head) asking for them all slowed its attention by
// ~10 %; the K rows ahead cost nothing there. Longer heads' V rows are asked for 16 positions
// ahead as the output sums read them instead (VRow; the AVX-512 and AVX2 kernels).
// KRow and VRow return the row they are asked for on purpose: GCC 12 dropped every call to an
// inline helper that made these prefetches and returned nothing, judging it free of effects before
// inlining it. Marked always_inline it dropped them too (every kernel's, 2026-12-07): leave it to
// the compiler, and check the kernels still hold prefetch instructions after changing them.
class KvRowPrefetch {
 public:
  static constexpr int64_t kAhead = 16;
  static constexpr int64_t kMaxValueBytes = 128 << 10;

  // For positions [seen_from, span) of a call.
  KvRowPrefetch(const AttentionHeads& a, int64_t seen_from, int64_t span)
      : a_(a),
        span_(span),
        head_bytes_(KvValuesBytes(a.dtype, a.head_dim)),
        values_((span - seen_from) * head_bytes_ <= kMaxValueBytes) {}

  // Seen position p's K row, with p's V row and the K row kAhead on asked for.
  const uint8_t* KRow(int64_t p) const {
    if (values_) kernels::PrefetchToL1(a_.v + a_.KvRowOffset(p), head_bytes_);
    if (p + kAhead < span_) kernels::PrefetchToL1(a_.k + a_.KvRowOffset(p + kAhead), head_bytes_);
    return a_.k + a_.KvRowOffset(p);
  }

  // Position p's V row `row`, as an output pass over positions before `end` walks them, with the
  // V row kAhead on asked for where KRow did not ask for the V rows (a long head's).
  const uint8_t* VRow(int64_t p, const uint8_t* row, int64_t end) const {
    if (!values_ && p + kAhead < end) {
      kernels::PrefetchToL1(a_.v + a_.KvRowOffset(p + kAhead), head_bytes_);
    }
    // Opaque to the compiler: GCC replaced calls it saw returning their argument by the
    // argument, prefetches and all.
    asm volatile("" : "+r"(row));
    return row;
  }

 private:
  const AttentionHeads& a_;
  int64_t span_, head_bytes_;
  bool values_;
};

using AttendFn = void (*)(const AttentionHeads& a);

// The kernel for a level, cache type and head size.
AttendFn GetAttend(SimdLevel level, DType kv_type, int64_t head_dim);

namespace kernels {
// Each of `rows` rows of `len` scores becomes its softmax, in place (max subtracted first).
void SoftmaxRows(float* scores, int64_t rows, int64_t len);
// The same with a vector exp (within 2 ulp of std::exp).
void SoftmaxRowsAvx512(float* scores, int64_t rows, int64_t len);
// One row's softmax with an extra logit `sink` that joins the normalisation (-inf: none).
void SoftmaxRowAvx512(float* s, int64_t len, float sink);
void AttendPortable(const AttentionHeads& a);
// nullptr where head_dim is not a multiple of 16 (or above 256), or the type is not F32, F16 or
// Q8_0.
AttendFn Avx512Attend(DType kv_type, int64_t head_dim);
// AVX2 + FMA + F16C; head_dim a multiple of 8.
void AttendAvx2(const AttentionHeads& a);
}  // namespace kernels

}  // namespace moe
