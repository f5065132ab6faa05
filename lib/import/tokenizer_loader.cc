#include "lib/import/tokenizer_loader.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/format/moe_reader.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_tokenizer.h"
#include "lib/import/hf_tokenizer.h"
#include "lib/import/model_loader.h"

namespace moe {

absl::StatusOr<TokenizerData> LoadTokenizerData(const std::string& path) {
  // Model files are recognised by content, as LoadModelSpec does; tokenizer.json by name.
  const ModelFileKind kind = DetectModelFile(path);
  switch (kind) {
    case ModelFileKind::kGguf: {
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
      return TokenizerDataFromGguf(*gguf);
    }
    case ModelFileKind::kMoe: {
      MOE_ASSIGN_OR_RETURN(ModelSpec spec, ReadMoeFile(path));
      if (spec.tokenizer.tokens.empty()) {
        return absl::NotFoundError(absl::StrCat("'", path, "' carries no tokenizer"));
      }
      return std::move(spec.tokenizer);
    }
    case ModelFileKind::kMissing:
    case ModelFileKind::kUnreadable:
    case ModelFileKind::kDirectory:
    case ModelFileKind::kHfCheckpoint:
      return NotAModelError(kind, path, "a .gguf, tokenizer.json or .moe file");
    case ModelFileKind::kTruncated:
    case ModelFileKind::kOther:
      break;
  }
  if (absl::EndsWith(path, ".json")) return TokenizerDataFromHfJson(path);
  return NotAModelError(kind, path, "a .gguf, tokenizer.json or .moe file");
}

}  // namespace moe
