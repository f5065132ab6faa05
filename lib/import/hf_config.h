// Hugging Face config.json -> architecture and hyper-parameters, following the transformers
// configuration classes (MixtralConfig, Qwen2MoeConfig, OlmoeConfig, Qwen3MoeConfig, Glm4MoeConfig,
// DeepseekV2Config, DeepseekV3Config, GptOssConfig) for what a missing key means. Anything the
// runtime would compute differently from transformers is an error naming the key, never silently
// ignored. glm4moe, deepseek2 and gpt-oss go through llama.cpp's metadata keys (hf_metadata.h), so
// their HParams are those of the same checkpoint converted to GGUF.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/model_spec.h"

namespace moe {

struct HfConfig {
  Arch arch = Arch::kLlama;
  std::string hf_architecture;  // "MixtralForCausalLM", ...
  HParams hp;
  // rope_scaling of type llama3 (Llama-3-based MoE merges): the per-pair frequency divisors
  // llama.cpp's converter writes as rope_freqs.weight; empty: none.
  std::vector<float> rope_freq_factors;
};

// `json_text` is the content of config.json.
absl::StatusOr<HfConfig> ParseHfConfig(const std::string& json_text);

}  // namespace moe
