// Reads a SentencePiece tokenizer.model with Debian's libsentencepiece.
//
// Deliberately free of Abseil: sentencepiece_processor.h declares `namespace absl { using
// std::string_view; }`, which collides with Debian's Abseil (built with its own
// absl::string_view class), so the translation unit that includes it must include no Abseil
// header. sentencepiece_tokenizer.h wraps this in absl::StatusOr.
#pragma once

#include <string>

#include "lib/tokenizer/tokenizer_data.h"

namespace moe::spm_internal {

// Fills the vocabulary of *out (model "llama": tokens, scores, token types, special ids and the
// dummy-prefix rule). Returns an error message, or "" on success.
std::string ReadSentencePieceModel(const std::string& path, TokenizerData* out);

}  // namespace moe::spm_internal
