#include "lib/import/model_loader.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/format/moe_reader.h"
#include "lib/import/gguf_import.h"
#include "lib/import/hf_import.h"

namespace moe {
namespace fs = std::filesystem;

namespace {

// Shorter than GGUF's magic and a prefix of it (the empty file too).
bool MayBeCutGgufFile(absl::Span<const uint8_t> head) {
  return head.size() < 4 && std::memcmp(head.data(), "GGUF", head.size()) == 0;
}

}  // namespace

ModelFileKind DetectModelFile(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return ModelFileKind::kMissing;
  if (LooksLikeHfCheckpoint(path)) return ModelFileKind::kHfCheckpoint;
  if (st.type() == fs::file_type::directory) return ModelFileKind::kDirectory;
  std::ifstream f(path, std::ios::binary);
  if (!f) return ModelFileKind::kUnreadable;
  uint8_t head[12] = {};
  f.read(reinterpret_cast<char*>(head), sizeof(head));
  if (f.bad()) return ModelFileKind::kUnreadable;
  const absl::Span<const uint8_t> got(head, static_cast<size_t>(f.gcount()));
  if (got.size() >= 4 && std::memcmp(head, "GGUF", 4) == 0) return ModelFileKind::kGguf;
  if (LooksLikeMoeFile(got)) return ModelFileKind::kMoe;
  if (MayBeCutMoeFile(got) || MayBeCutGgufFile(got)) return ModelFileKind::kTruncated;
  return ModelFileKind::kOther;
}

absl::Status NotAModelError(ModelFileKind kind, const std::string& path,
                            const std::string& expected) {
  const std::string q = absl::StrCat("'", path, "'");
  switch (kind) {
    case ModelFileKind::kMissing:
      return absl::NotFoundError(absl::StrCat("no such file or directory: ", q));
    case ModelFileKind::kUnreadable:
      return absl::PermissionDeniedError(absl::StrCat("cannot read ", q, ": ",
                                                      std::strerror(errno)));
    case ModelFileKind::kDirectory:
      return absl::InvalidArgumentError(absl::StrCat(
          q, " is a directory without a config.json, not a Hugging Face checkpoint"));
    case ModelFileKind::kTruncated:
      return absl::DataLossError(absl::StrCat(
          q, " is truncated: ", fs::file_size(path), " bytes are too few for a model header"));
    default:
      return absl::UnimplementedError(
          absl::StrCat(q, " is not a model file libmoe reads (expected ", expected, ")"));
  }
}

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path) {
  const ModelFileKind kind = DetectModelFile(path);
  switch (kind) {
    case ModelFileKind::kHfCheckpoint:
      return ImportHfCheckpoint(path);
    case ModelFileKind::kGguf:
      return ImportGguf(path);
    case ModelFileKind::kMoe:
      return ReadMoeFile(path);
    default:
      return NotAModelError(kind, path,
                            "a .moe or GGUF file, or a Hugging Face checkpoint directory");
  }
}

}  // namespace moe
