// Test fixture generator: a Hugging Face tokenizer.json in the SentencePiece style (Mistral's and
// Mixtral's repositories) for a SentencePiece BPE vocabulary read from GGUF, written the way
// transformers' converter writes one: every piece in the BPE vocab, byte fallback, merges for
// every split of a piece into two pieces ordered by the piece's score, control and user-defined
// pieces as added tokens, a post-processor that puts BOS first, and the decoder.
#pragma once

#include "lib/tokenizer/tokenizer_data.h"
#include "nlohmann/json.hpp"

namespace moe::testing {

enum class SentencePieceJsonForm {
  kNormalizer,  // newer files: Prepend("▁") + Replace(" " -> "▁") normalizers, no pre-tokenizer
  kMetaspace,   // older files: a Metaspace pre-tokenizer and decoder
};

nlohmann::json SentencePieceTokenizerJson(const TokenizerData& spm, SentencePieceJsonForm form);

}  // namespace moe::testing
