// Run-time row layouts for the AVX-512 decode kernels. A Q8_0 or Q4_0 row stores each block's
// f16 scale next to its quants, which costs the kernels a gather per block; the R layouts keep
// the same bytes but put all quants first and all scales after them:
//   Q8_0R: [nb x 32 int8 quants][nb x f16 scales]
//   Q4_0R: [nb x 16 nibble bytes][nb x f16 scales], nibbles regrouped per 4 blocks (128
//          elements, 64 bytes): byte j holds element j in its low nibble and element j + 64 in
//          its high one, so one 64-byte load yields two runs of 64 consecutive elements.
#pragma once

#include <cstdint>

#include "lib/base/dtype.h"

namespace moe {

// The run-time layout for rows of `cols` elements of type t, or t itself when there is none.
DType RepackedType(DType t, int64_t cols);

// Rewrites `rows` rows in place from t to RepackedType(t, cols).
void RepackRows(DType t, uint8_t* data, int64_t rows, int64_t cols);

// Dequantizes one whole row of a run-time layout.
void DequantizeRepackedRow(DType t, const uint8_t* row, float* dst, int64_t cols);

}  // namespace moe
