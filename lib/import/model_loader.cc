#include "lib/import/model_loader.h"

#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/format/moe_reader.h"
#include "lib/import/gguf_import.h"
#include "lib/import/hf_import.h"

namespace moe {

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path) {
  if (LooksLikeHfCheckpoint(path)) return ImportHfCheckpoint(path);
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat("cannot open model file '", path, "'"));
  }
  uint8_t head[12] = {};
  f.read(reinterpret_cast<char*>(head), sizeof(head));
  const size_t got = static_cast<size_t>(f.gcount());
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return ImportGguf(path);
  if (LooksLikeMoeFile({head, got})) return ReadMoeFile(path);
  return absl::InvalidArgumentError(absl::StrCat(
      "'", path,
      "' is neither a .moe nor a GGUF model file, nor a Hugging Face checkpoint directory"));
}

}  // namespace moe
