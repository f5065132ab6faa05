// Regex pre-tokenization for byte-level BPE: a sequence of "Isolated" splits (Hugging Face
// Split pre-tokenizer semantics). Each regex is applied to every piece the previous one left;
// matches and the gaps between them both become pieces. Regexes use ICU syntax; \s and \S are
// rewritten to the Unicode White_Space property, which is what Hugging Face's Oniguruma means.
#pragma once

#include <unicode/uversion.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

U_NAMESPACE_BEGIN
class RegexPattern;
U_NAMESPACE_END

namespace moe {

// The split regexes llama.cpp associates with a GGUF tokenizer.ggml.pre name; Unimplemented for
// names it does not know.
absl::StatusOr<std::vector<std::string>> RegexesForPreTokenizer(absl::string_view pre);

class PreTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(
      const std::vector<std::string>& regexes);
  ~PreTokenizer();

  // Byte ranges [begin, end) of text, in order, covering all of it. Thread-safe.
  std::vector<std::pair<size_t, size_t>> Split(absl::string_view text) const;

 private:
  PreTokenizer() = default;
  std::vector<std::unique_ptr<icu::RegexPattern>> patterns_;
};

}  // namespace moe
