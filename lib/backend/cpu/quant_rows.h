// Row kernels over the weight types: dequantize a row, and dot a row with float activations.
// Block layouts are GGUF's (ggml-common.h); rows hold a whole number of blocks.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "lib/backend/weight_view.h"
#include "lib/base/dtype.h"

namespace moe {

// dst[0..n) = the row's values. t is not a row-group layout (rows of those are not contiguous:
// use DequantizeWeightRow).
void DequantizeRow(DType t, const uint8_t* row, float* dst, int64_t n);

// dst[0..w.cols) = row r of w, in any layout.
void DequantizeWeightRow(const WeightView& w, int64_t r, float* dst);

// sum_i row[i] * x[i], accumulated in F32 (activations are not quantized).
float DotRow(DType t, const uint8_t* row, const float* x, int64_t n);

// Encodes n floats (a whole number of blocks) as type t: Q8_0/Q4_0 round as ggml's reference
// quantizers do; K-quants use the simple fits of kquant_encode.h.
absl::Status QuantizeRow(DType t, const float* src, uint8_t* dst, int64_t n);

}  // namespace moe
