// Hugging Face config.json -> architecture and hyper-parameters, following the transformers
// configuration classes (MixtralConfig, Qwen2MoeConfig, OlmoeConfig, Qwen3MoeConfig, Glm4MoeConfig,
// DeepseekV2Config, DeepseekV3Config, GptOssConfig, Ernie4_5_MoeConfig, GraniteMoeConfig,
// Llama4TextConfig, Qwen3NextConfig, Qwen3_5MoeTextConfig) for what a missing key means. Anything
// the runtime would compute differently from transformers is an error naming the key, never
// silently ignored. The families after Qwen3-MoE go through llama.cpp's metadata keys
// (hf_metadata.h), so their HParams are those of the same checkpoint converted to GGUF, refined by
// what config.json states and a GGUF file cannot (Llama 4's chunk size, NoPE layers and query
// temperature). A multimodal wrapper (Llama4ForConditionalGeneration) is read for its language
// model only.
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
  // What the language model's tensor names start with ("language_model." in a multimodal
  // wrapper's checkpoint).
  std::string tensor_prefix;
  // What the language model's body (embeddings, layers, final norm) is named under where a
  // family's function reads it from here rather than writing "model." (Qwen3.5's multimodal
  // checkpoints: "model.language_model.", with lm_head outside it).
  std::string model_prefix = "model.";
};

// `json_text` is the content of config.json.
absl::StatusOr<HfConfig> ParseHfConfig(const std::string& json_text);

}  // namespace moe
