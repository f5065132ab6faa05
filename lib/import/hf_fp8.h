// Block-scaled FP8 checkpoints (transformers' "fp8" quantization: DeepSeek-V3/R1, Qwen3 and GLM
// *-FP8 releases): a weight is F8_E4M3 beside "<name>_scale_inv", one F32 or BF16 factor per
// block of weight_block_size values; its value is the E4M3 number times its block's factor.
// They are dequantized at import, as llama.cpp's converter does.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/import/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace moe {

struct Fp8Blocks {
  int64_t rows = 0, cols = 0;
};

// The block size config.json's quantization_config gives for "fp8"; none without that section
// or for "mxfp4" (gpt-oss, whose blocks the tensor plan reads); an error for other methods.
absl::StatusOr<std::optional<Fp8Blocks>> Fp8BlocksOf(const nlohmann::json& config);

// An OCP E4M3 (fn) byte: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, no infinities,
// S.1111.111 NaN.
float E4m3ToFloat(uint8_t v);

// weight ([rows, cols], F8_E4M3) times scale_inv ([ceil(rows / b.rows), ceil(cols / b.cols)],
// F32 or BF16), row-major. A stack of matrices ([..., rows, cols], as stacked experts are stored)
// has a scale per block of each matrix ([..., ceil(rows / b.rows), ceil(cols / b.cols)]).
absl::StatusOr<std::vector<float>> DequantizeFp8(const SafetensorsTensor& weight,
                                                 const SafetensorsTensor& scale_inv, Fp8Blocks b);

}  // namespace moe
