// Hugging Face config.json -> architecture and hyper-parameters, following the transformers
// configuration classes (MixtralConfig, Qwen2MoeConfig, OlmoeConfig, Qwen3MoeConfig) for what a
// missing key means. Anything the runtime would compute differently from transformers is an
// error naming the key, never silently ignored.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/model/model_spec.h"

namespace moe {

struct HfConfig {
  Arch arch = Arch::kLlama;
  std::string hf_architecture;  // "MixtralForCausalLM", ...
  HParams hp;
};

// `json_text` is the content of config.json.
absl::StatusOr<HfConfig> ParseHfConfig(const std::string& json_text);

}  // namespace moe
