// How attention finds and reads cached keys and values, written once as MOE_HOST_DEVICE code for
// the CPU backend and the CUDA attention kernel (kernels/attention.cu; issue 21's one numeric
// core): where a position's row is in a paged cache, which positions a query sees, and one
// value of a cached row (F32, F16 or Q8_0).
#pragma once

#include <cstdint>

#include "lib/base/dtype_enum.h"
#include "lib/base/half.h"
#include "lib/base/host_device.h"

namespace moe {

// Where a KV cache keeps a position's row: in a paged cache (lib/kv) position p is row
// p % 2^block_shift of block blocks[p >> block_shift] (the sequence's block table), block b
// starting b * block_bytes past the layer's K (or V). blocks == nullptr: the rows of positions
// 0, 1, ... follow each other.
//
// head_stride == 0: a row holds every KV head's values, head after head. Otherwise each KV head
// keeps rows of its own values alone, head h's starting h * head_stride bytes past head 0's: in a
// block (head_stride = a head's block of rows) or in the whole cache (unpaged). The caches keep
// that layout because attention reads one KV head at a time: from rows of every head it took a
// few lines of each row, scattered; a head's own rows are one contiguous run a block, which the
// hardware prefetcher streams.
struct KvPaging {
  const int32_t* blocks = nullptr;
  int block_shift = 0;
  int64_t block_bytes = 0;
  int64_t head_stride = 0;

  // Where position p's row starts, in bytes past K or V (or past a head's first row, see
  // HeadStart); rows of row_bytes each.
  MOE_HOST_DEVICE int64_t RowOffset(int64_t p, int64_t row_bytes) const {
    if (blocks == nullptr) return p * row_bytes;
    return blocks[p >> block_shift] * block_bytes +
           (p & ((int64_t{1} << block_shift) - 1)) * row_bytes;
  }
  // Where KV head h's rows start (head_bytes: one head's values of a row), and the bytes from
  // one of its rows to the next within a block: head h's row of position p is at
  // HeadStart(h, head_bytes) + RowOffset(p, HeadRowBytes(head_bytes, n_heads)).
  MOE_HOST_DEVICE int64_t HeadStart(int64_t h, int64_t head_bytes) const {
    return h * (head_stride != 0 ? head_stride : head_bytes);
  }
  MOE_HOST_DEVICE int64_t HeadRowBytes(int64_t head_bytes, int64_t n_heads) const {
    return head_stride != 0 ? head_bytes : n_heads * head_bytes;
  }
  MOE_HOST_DEVICE int64_t HeadRowOffset(int64_t p, int64_t h, int64_t head_bytes,
                                        int64_t n_heads) const {
    return HeadStart(h, head_bytes) + RowOffset(p, HeadRowBytes(head_bytes, n_heads));
  }
};

// The cached positions a query at `position` attends to: [first, end), the last `window` of
// 0..position (window 0: all), or with `chunked` those of its chunk of `window` positions
// (Llama 4: p - p % window .. p).
struct KvSpan {
  int64_t first = 0, end = 0;
};
MOE_HOST_DEVICE inline KvSpan AttendedSpan(int64_t position, int64_t window, bool chunked = false) {
  const int64_t end = position + 1;
  if (window > 0 && chunked) return {position - position % window, end};
  return {window > 0 && end > window ? end - window : 0, end};
}

// Bytes of n cached values of type t (F32, F16, or Q8_0 in whole blocks of 32); 0 for any other
// type. RowBytes for these types, on the device too.
MOE_HOST_DEVICE inline int64_t KvValuesBytes(DType t, int64_t n) {
  switch (t) {
    case DType::kF32:
      return 4 * n;
    case DType::kF16:
      return 2 * n;
    case DType::kQ8_0:
      return 34 * (n / 32);
    default:
      return 0;
  }
}

// Value i of a cached row of type t (F32, F16, or Q8_0 in blocks of 32: d * q, as
// DecodeQ8_0Block decodes it); 0 for any other type.
MOE_HOST_DEVICE inline float KvValueAt(DType t, const uint8_t* row, int64_t i) {
  switch (t) {
    case DType::kF32:
      return LoadF32(row + 4 * i);
    case DType::kF16:
      return HalfToFloat(LoadU16(row + 2 * i));
    case DType::kQ8_0: {
      const uint8_t* block = row + 34 * (i / 32);
      return HalfToFloat(LoadU16(block)) * static_cast<int8_t>(block[2 + i % 32]);
    }
    default:
      return 0.f;
  }
}

}  // namespace moe
