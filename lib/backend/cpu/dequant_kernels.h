// SIMD row dequantization, chosen at run time; the portable DequantizeRow (quant_rows.h) is the
// reference and the fallback.
#pragma once

#include <cstdint>

#include "lib/base/dtype.h"

namespace moe {

using DequantRowFn = void (*)(const uint8_t* row, float* dst, int64_t n);

namespace kernels {
// nullptr for types without an AVX-512 dequantizer.
DequantRowFn Avx512DequantRow(DType t);
}  // namespace kernels

}  // namespace moe
