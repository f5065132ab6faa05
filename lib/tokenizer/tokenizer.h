// Text <-> token ids for the vocabularies libmoe supports: SentencePiece-style BPE (GGUF model
// "llama") and byte-level BPE (GGUF model "gpt2", Hugging Face ByteLevel tokenizers). Built
// from TokenizerData; immutable afterwards, so one instance may be shared across threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/tokenizer/bpe_merge.h"
#include "lib/tokenizer/pre_tokenizer.h"
#include "lib/tokenizer/special_tokens.h"
#include "lib/tokenizer/tokenizer_data.h"

namespace moe {

struct EncodeOptions {
  // Prepend BOS when the vocabulary asks for it (TokenizerData::add_bos) and has one.
  bool add_bos = false;
  // Recognise control tokens ("<|im_start|>", "<s>") written in the text. Off by default so
  // user text cannot inject them; user-defined added tokens are always recognised.
  bool parse_special = false;
};

struct DecodeOptions {
  // Write control tokens (BOS, EOS, "<|im_end|>") as their text instead of dropping them.
  bool render_special = true;
};

class Tokenizer {
 public:
  // Unimplemented for vocabulary types other than "llama" and "gpt2" (e.g. "bert" WordPiece).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const TokenizerData& data);

  std::vector<int32_t> Encode(absl::string_view text, const EncodeOptions& options = {}) const;

  // The concatenated bytes of the tokens (not necessarily valid UTF-8 for a partial sequence;
  // StreamDecoder produces valid pieces). OutOfRange for an id outside the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     const DecodeOptions& options = {}) const;

  // The bytes one token stands for in text, before the leading-space rule.
  absl::StatusOr<std::string> TokenToPiece(int32_t id, const DecodeOptions& options = {}) const;

  // True when decoding drops one leading space from the first text piece (SentencePiece
  // add_space_prefix).
  bool strips_leading_space() const { return spm_ && data_.add_space_prefix; }
  bool IsControl(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(data_.tokens.size()); }
  int32_t bos_id() const { return data_.bos_id; }
  int32_t eos_id() const { return data_.eos_id; }
  int32_t eot_id() const { return eot_id_; }
  bool IsEndOfGeneration(int32_t id) const { return eog_ids_.contains(id); }
  const TokenizerData& data() const { return data_; }

 private:
  explicit Tokenizer(TokenizerData data) : data_(std::move(data)) {}
  absl::Status Init();
  void EncodeSpm(absl::string_view text, bool prefix_space, std::vector<int32_t>* out) const;
  void EncodeByteLevel(absl::string_view text, std::vector<int32_t>* out) const;
  void EncodeByteLevelWord(absl::string_view word, std::vector<int32_t>* out) const;
  int32_t TokenType(int32_t id) const;

  TokenizerData data_;
  bool spm_ = false;
  int32_t eot_id_ = -1;
  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  absl::flat_hash_set<int32_t> eog_ids_;
  SpecialTokenMatcher specials_;
  // SentencePiece byte fallback tokens "<0xXX>", byte-level single-byte tokens; -1 if absent.
  std::array<int32_t, 256> byte_ids_;
  MergeTable merges_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
};

}  // namespace moe
