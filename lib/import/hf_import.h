// Hugging Face checkpoint directory -> ModelSpec: config.json, one *.safetensors file or shards
// listed in model.safetensors.index.json, and the tokenizer (tokenizer.json, else a SentencePiece
// tokenizer.model; tokenizer_config.json for special tokens and the chat template).
// Supported: MixtralForCausalLM, Qwen2MoeForCausalLM, OlmoeForCausalLM, Qwen3MoeForCausalLM,
// Glm4MoeForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM (with its
// experts as plain tensors or as MXFP4 _blocks/_scales).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "lib/base/dtype.h"
#include "lib/model/model_spec.h"

namespace moe {

// True when `path` is a directory holding a config.json.
bool LooksLikeHfCheckpoint(const std::string& path);

// out_dtype: the element type of the weight matrices in the result. Unset keeps each tensor's
// own type (F32/F16/BF16, zero copy from the mapped files). Quantized types (Q8_0, Q4_0) apply
// to the 2-D weights except the router, which stays F32 like llama.cpp keeps it, so expert
// choice does not flip on rounding; norms, biases and sinks are always F32. MXFP4 experts stay
// MXFP4 (repacked exactly) unless a float type is asked for.
//
// convert_at: kImport makes every converted tensor (another type, a rearranged layout, repacked
// MXFP4, dequantized FP8) during the import, held in memory by the result; kWrite leaves them
// deferred (TensorSpec::produce), made one at a time where they are needed, so that writing the
// import to a file (moe-convert, moe-quantize) takes memory for one tensor, not for the model.
// Either way the checkpoint's tensors are checked during the import.
enum class ConvertAt { kImport, kWrite };
absl::StatusOr<ModelSpec> ImportHfCheckpoint(const std::string& dir,
                                             std::optional<DType> out_dtype = std::nullopt,
                                             ConvertAt convert_at = ConvertAt::kImport);

}  // namespace moe
