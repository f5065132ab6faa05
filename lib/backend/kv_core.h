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
struct KvPaging {
  const int32_t* blocks = nullptr;
  int block_shift = 0;
  int64_t block_bytes = 0;

  // Where position p's row starts, in bytes past K or V; rows of row_bytes each.
  MOE_HOST_DEVICE int64_t RowOffset(int64_t p, int64_t row_bytes) const {
    if (blocks == nullptr) return p * row_bytes;
    return blocks[p >> block_shift] * block_bytes +
           (p & ((int64_t{1} << block_shift) - 1)) * row_bytes;
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
