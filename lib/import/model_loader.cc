#include "lib/import/model_loader.h"

#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/format/moe_reader.h"
#include "lib/import/gguf_import.h"
#include "lib/import/hf_import.h"

namespace moe {

ModelFileKind DetectModelFile(const std::string& path) {
  if (LooksLikeHfCheckpoint(path)) return ModelFileKind::kHfCheckpoint;
  std::ifstream f(path, std::ios::binary);
  if (!f) return ModelFileKind::kUnreadable;
  uint8_t head[12] = {};
  f.read(reinterpret_cast<char*>(head), sizeof(head));
  const size_t got = static_cast<size_t>(f.gcount());
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return ModelFileKind::kGguf;
  if (LooksLikeMoeFile({head, got})) return ModelFileKind::kMoe;
  return ModelFileKind::kOther;
}

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path) {
  switch (DetectModelFile(path)) {
    case ModelFileKind::kHfCheckpoint:
      return ImportHfCheckpoint(path);
    case ModelFileKind::kGguf:
      return ImportGguf(path);
    case ModelFileKind::kMoe:
      return ReadMoeFile(path);
    case ModelFileKind::kUnreadable:
      return absl::NotFoundError(absl::StrCat("cannot open model file '", path, "'"));
    case ModelFileKind::kOther:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", path,
      "' is neither a .moe nor a GGUF model file, nor a Hugging Face checkpoint directory"));
}

}  // namespace moe
