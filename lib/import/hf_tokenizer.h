// Reads a Hugging Face tokenizer.json (and the tokenizer_config.json beside it, when present)
// into TokenizerData. Supports the byte-level BPE tokenizers of the MoE families (Qwen2/3,
// DeepSeek-V3, Llama-3, GPT-OSS, ...): BPE model, Sequence / Split / ByteLevel / Digits
// pre-tokenizers, NFC normalizer, added tokens, BOS rules.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/tokenizer/tokenizer_data.h"

namespace moe {

absl::StatusOr<TokenizerData> TokenizerDataFromHfJson(const std::string& tokenizer_json_path);

}  // namespace moe
