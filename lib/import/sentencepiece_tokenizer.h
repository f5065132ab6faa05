// A SentencePiece tokenizer.model (and the tokenizer_config.json beside it, when present) ->
// TokenizerData of model "llama" (SentencePiece-style BPE with scores and byte fallback).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/tokenizer/tokenizer_data.h"

namespace moe {

absl::StatusOr<TokenizerData> TokenizerDataFromSentencePiece(const std::string& model_path);

}  // namespace moe
