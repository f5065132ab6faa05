// Element types of weight tensors. Quantized types use the block layouts GGUF defines, so files
// can be carried over bit-exact. The numbering is part of the .moe format: append only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "lib/base/dtype_enum.h"

namespace moe {

// Rows per interleaved group: 16 for the row-group layouts, 1 for every other type. Group g
// starts where row 16 g would, since a group holds the bytes of 16 rows.
inline constexpr int kGroupRows = 16;
inline int RowGroup(DType t) {
  const bool group = (t >= DType::kQ8_0X16 && t <= DType::kQ5_KX16) || t == DType::kMXFP4X16 ||
                     t == DType::kQ2_KX16 || t == DType::kQ3_KX16 || t == DType::kQ5_0X16 ||
                     t == DType::kIQ4_NLX16 || t == DType::kIQ4_XSX16 || t == DType::kQ4_1X16 ||
                     t == DType::kQ5_1X16;
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

// The most elements a tensor a file describes may have: far beyond any real tensor, far below
// where element counts and byte sizes (int64, size_t) overflow.
inline constexpr uint64_t kMaxTensorElements = uint64_t{1} << 50;

// Whether the product of the positive dimensions stays within kMaxTensorElements (checked
// factor by factor, so it never overflows itself). Readers check a file's shapes with it before
// anything multiplies them out.
template <typename Dims>
bool ElementCountFits(const Dims& dims) {
  uint64_t elements = 1;
  for (auto d : dims) {
    if (d <= 0 || static_cast<uint64_t>(d) > kMaxTensorElements / elements) return false;
    elements *= static_cast<uint64_t>(d);
  }
  return true;
}

}  // namespace moe
