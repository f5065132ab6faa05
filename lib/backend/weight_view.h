// A read-only view of a 2-D weight matrix [rows x cols], rows contiguous, in any DType.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/base/dtype.h"

namespace moe {

struct WeightView {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;

  bool empty() const { return data == nullptr; }
  size_t row_bytes() const { return RowBytes(dtype, cols); }
  size_t byte_size() const { return row_bytes() * rows; }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes(); }
};

}  // namespace moe
