// Writes a GGUF fixture back out as the Hugging Face checkpoint llama.cpp's convert_hf_to_gguf.py
// would have made it from: a config.json with the family's transformers keys and one safetensors
// file with transformers' names and layouts (DeepSeek's kv_b_proj joined again, gpt-oss's stacked
// experts with gate and up interleaved, or as MXFP4 blocks and scales, GLM's MTP layer kept).
// Quantized non-expert weights are written as their F32 values.
#pragma once

#include <filesystem>
#include <string>

#include "nlohmann/json.hpp"

namespace moe::testing {

// glm4moe -> Glm4MoeForCausalLM, deepseek2 -> DeepseekV2ForCausalLM (softmax routing) or
// DeepseekV3ForCausalLM (sigmoid), gpt-oss -> GptOssForCausalLM (MXFP4 experts when the GGUF's
// are), qwen3moe -> Qwen3MoeForCausalLM. Returns config.json's content; fails the calling test on
// any problem.
nlohmann::json WriteGgufAsHfCheckpoint(const std::string& gguf_path,
                                       const std::filesystem::path& dir);

}  // namespace moe::testing
