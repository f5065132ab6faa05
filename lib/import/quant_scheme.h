// Which weight type each tensor gets under a quantization scheme ("q8_0", "q4_0", "q4_k_m", ...),
// following llama.cpp's choices so that files from moe-quantize and moe-synth look like the
// files people download.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/base/dtype.h"

namespace moe {

// Schemes: f32, f16, bf16, q8_0, q4_0, q2_k, q3_k_m, q4_k, q4_k_m, q5_k, q6_k, mxfp4_moe (MXFP4
// routed experts, Q8_0 elsewhere: how gpt-oss ships). The mixed ones (q2_k, q3_k_m, q4_k_m) follow
// llama-quantize's main rules, not every special case (its 8-expert and 70B bumps).
const std::vector<std::string>& QuantSchemeNames();
bool IsQuantScheme(const std::string& scheme);

// The type for tensor `name` (GGUF naming) of shape [rows, cols] in layer `layer` (-1: none) of
// n_layer. 1-D tensors, routers and tensors that are not weights (biases, as llama-quantize
// keeps whatever does not end in "weight") stay F32; rows that do not fit the chosen type's
// blocks fall back as FallbackForRowLength says.
DType QuantTypeFor(const std::string& scheme, const std::string& name, int64_t cols, int64_t layer,
                   int64_t n_layer, bool one_dimensional);

// t itself when rows of `cols` values are whole blocks of it; otherwise llama-quantize's
// fallback (Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; IQ4_XS -> IQ4_NL), or
// F16 when that does not fit either.
DType FallbackForRowLength(DType t, int64_t cols);

// llama.cpp's general.file_type number for a scheme.
uint32_t LlamaFileType(const std::string& scheme);

}  // namespace moe
