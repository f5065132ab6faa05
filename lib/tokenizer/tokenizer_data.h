// Everything a tokenizer needs, as carried by a model file (GGUF tokenizer.ggml.* keys, Hugging
// Face tokenizer.json, or the .moe container). Plain data: the tokenizer classes build their
// lookup structures from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe {

// Token attributes, numbered as GGUF's tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TokenizerData {
  // "llama" = SentencePiece-style BPE, "gpt2" = byte-level BPE (GGUF tokenizer.ggml.model names).
  std::string model;
  // Pre-tokenizer name as GGUF tokenizer.ggml.pre spells it ("deepseek-coder", "gpt-2", ...);
  // empty when pre_regexes is given explicitly. "none": no splitting at all.
  std::string pre;
  // Split regexes applied in order (from tokenizer.json); empty means "derive from pre".
  std::vector<std::string> pre_regexes;
  std::vector<std::string> tokens;
  std::vector<float> scores;         // may be empty (byte-level BPE)
  std::vector<int32_t> token_types;  // TokenType values; may be empty (all normal)
  std::vector<std::string> merges;   // "left right", rank = index
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  // Other tokens that end generation, besides EOS and EOT: GGUF's end-of-message
  // (tokenizer.ggml.eom_token_id, GLM's <|observation|>) and the ids a Hugging Face
  // generation_config.json lists as eos_token_id (GLM-4.5 ends a turn with <|user|>).
  std::vector<int32_t> eog_ids;
  bool add_bos = false;
  bool add_eos = false;
  // SentencePiece ("llama"): prepend "▁" to text that starts the input or follows a special
  // token, and drop that one space again when detokenizing. Byte-level BPE: prepend " " to the
  // input unless it starts with one (tokenizer.json ByteLevel add_prefix_space).
  bool add_space_prefix = true;
  // Byte-level BPE: a pre-token that is itself in the vocabulary is emitted whole, without
  // running merges (tokenizer.json model.ignore_merges; llama.cpp sets it for llama3).
  bool ignore_merges = false;
  // Text normalization applied to non-special text before pre-tokenization: "" (none) or "NFC".
  std::string normalizer;
  std::string chat_template;
};

// Frees the vocabulary, scores, types, merges and split regexes (a built Tokenizer keeps its
// own), keeping the special ids, flags and chat template.
inline void ReleaseVocabulary(TokenizerData& data) {
  std::vector<std::string>().swap(data.tokens);
  std::vector<float>().swap(data.scores);
  std::vector<int32_t>().swap(data.token_types);
  std::vector<std::string>().swap(data.merges);
  std::vector<std::string>().swap(data.pre_regexes);
}

}  // namespace moe
