// Element types of weight tensors. Quantized types use the block layouts GGUF defines, so files
// can be carried over bit-exact. The numbering is part of the .moe format: append only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace moe {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,
  kQ4_0 = 4,
  kQ4_K = 5,
  kQ5_K = 6,
  kQ6_K = 7,
  // Run-time layouts: rows re-laid at load for the AVX-512 kernels (quants contiguous, the f16
  // scales after them). Same bytes per row as their source types; never stored in files.
  kQ8_0R = 8,
  kQ4_0R = 9,
  // Row-group layouts (all from here on): 16 rows interleaved so that one 512-bit register holds
  // four consecutive quants of each of the 16 rows and one integer instruction makes 16 rows'
  // partial sums (repack.h). The same bytes as 16 rows of the source type; row r is not contiguous.
  kQ8_0X16 = 10,
  kQ4_0X16 = 11,
  kQ4_KX16 = 12,
  kQ6_KX16 = 13,
  kQ5_KX16 = 14,
  // A file type again: OCP microscaling FP4 (GGUF type 39), one E8M0 scale byte then 16 bytes
  // of 4-bit E2M1 codes per 32 values (gpt-oss's expert weights).
  kMXFP4 = 15,
  // A row-group layout again (repack.h): 16 MXFP4 rows interleaved.
  kMXFP4X16 = 16,
  // File types again, the 2- and 3-bit K-quants (GGUF types 10 and 11), 256 values a super-block:
  // Q2_K: 16 bytes of 4-bit (scale, min) pairs, 64 bytes of 2-bit quants, f16 d and dmin;
  // Q3_K: 32 bytes of high bits, 64 bytes of 2-bit low quants, 12 bytes of 6-bit scales, f16 d.
  kQ2_K = 17,
  kQ3_K = 18,
  // Row-group layouts again (repack.h): 16 Q2_K or Q3_K rows interleaved.
  kQ2_KX16 = 19,
  kQ3_KX16 = 20,
};
inline constexpr int kNumDTypes = 21;

// Rows per interleaved group: 16 for the row-group layouts, 1 for every other type. Group g
// starts where row 16 g would, since a group holds the bytes of 16 rows.
inline constexpr int kGroupRows = 16;
inline int RowGroup(DType t) {
  const bool group = (t >= DType::kQ8_0X16 && t <= DType::kQ5_KX16) || t == DType::kMXFP4X16 ||
                     t == DType::kQ2_KX16 || t == DType::kQ3_KX16;
  return group ? kGroupRows : 1;
}

// Q8_0R, Q4_0R and the row groups: layouts made at run time (the row groups may also be stored).
inline bool IsRuntimeLayout(DType t) {
  return t == DType::kQ8_0R || t == DType::kQ4_0R || RowGroup(t) > 1;
}

// What a .moe file may store: the file types, and the row-group layouts (the same on every CPU:
// each SIMD level has kernels for them), but not the row layouts of one level (Q8_0R, Q4_0R).
inline bool IsStorableDType(DType t) { return !IsRuntimeLayout(t) || RowGroup(t) > 1; }

struct DTypeInfo {
  absl::string_view name;
  int block_elems;  // elements per block (1 for plain types)
  int block_bytes;  // bytes per block
};

const DTypeInfo& GetDTypeInfo(DType t);
inline absl::string_view DTypeName(DType t) { return GetDTypeInfo(t).name; }
// Case-insensitive; only the file types (run-time layouts have no name to ask for).
std::optional<DType> DTypeFromName(absl::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers
// through RowSizeValid).
inline bool RowSizeValid(DType t, int64_t n) {
  return n >= 0 && n % GetDTypeInfo(t).block_elems == 0;
}
inline size_t RowBytes(DType t, int64_t n) {
  const auto& i = GetDTypeInfo(t);
  return static_cast<size_t>(n / i.block_elems) * i.block_bytes;
}

}  // namespace moe
