// Attention of a few consecutive query positions over their cached keys and values, for all the
// query heads that share one KV head (grouped-query attention): each cached row is read once for
// every head of the group and every token of the tile.
#pragma once

#include <algorithm>
#include <cstdint>

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
// KRow and VRow return the row it is asked for on purpose: GCC 12 dropped every call to an inline
// helper that made these prefetches and returned nothing, judging it free of effects before
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
