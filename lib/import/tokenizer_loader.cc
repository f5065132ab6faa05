#include "lib/import/tokenizer_loader.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/format/moe_reader.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_tokenizer.h"
#include "lib/import/hf_tokenizer.h"

namespace moe {

absl::StatusOr<TokenizerData> LoadTokenizerData(const std::string& path) {
  if (absl::EndsWith(path, ".gguf")) {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
    return TokenizerDataFromGguf(*gguf);
  }
  if (absl::EndsWith(path, ".json")) return TokenizerDataFromHfJson(path);
  if (absl::EndsWith(path, ".moe")) {
    MOE_ASSIGN_OR_RETURN(ModelSpec spec, ReadMoeFile(path));
    if (spec.tokenizer.tokens.empty()) {
      return absl::NotFoundError(absl::StrCat("'", path, "' carries no tokenizer"));
    }
    return std::move(spec.tokenizer);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model file type (expected .gguf, tokenizer.json or .moe): ", path));
}

}  // namespace moe
