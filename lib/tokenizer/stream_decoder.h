// Incremental detokenization for streaming generated text: tokens go in one at a time, valid
// UTF-8 comes out. Bytes of a character split across tokens are held back until it completes;
// bytes that can never form a character come out as U+FFFD.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "lib/tokenizer/tokenizer.h"

namespace moe {

class StreamDecoder {
 public:
  // at_text_start: the first token fed starts the text, so the SentencePiece leading space is
  // dropped from it (pass false when continuing after a prompt).
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {},
                         bool at_text_start = true)
      : tokenizer_(tokenizer), options_(options), strip_space_(at_text_start) {}

  // Text completed by this token (possibly empty). OutOfRange for an id outside the
  // vocabulary; the decoder is unchanged then.
  absl::StatusOr<std::string> Add(int32_t id);

  // Whatever is still held back (an incomplete character), as U+FFFD.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions options_;
  bool strip_space_;
  std::string pending_;
};

}  // namespace moe
