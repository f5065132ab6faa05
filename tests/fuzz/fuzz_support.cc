#include "tests/fuzz/fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/tokenizer/utf8.h"

namespace moe::fuzz {

void Fail(absl::string_view what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %.*s\n", file, line,
               static_cast<int>(what.size()), what.data());
  std::abort();
}

namespace {

// The temp files handed out, removed when the process exits normally (a failing run aborts and
// keeps them, beside the saved crash input).
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    for (const std::string& p : paths) std::remove(p.c_str());
  }
};

TempFiles& HandedOut() {
  static TempFiles files;
  return files;
}

}  // namespace

std::string TempPath(absl::string_view name) {
  std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("moe_fuzz_", ::getpid(), "_", name))
          .string();
  HandedOut().paths.push_back(path);
  return path;
}

void WriteFileOrDie(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f)) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

std::vector<uint8_t> ReadFileOrDie(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::abort();
  }
  return {std::istreambuf_iterator<char>(f), {}};
}

std::string TestdataDir() { return MOE_TESTDATA_DIR; }

std::vector<std::pair<std::string, std::string>> MicroModels() {
  std::vector<std::pair<std::string, std::string>> models;
  for (const char* arch :
       {"llama", "qwen2moe", "olmoe", "qwen3moe", "gpt-oss", "glm4moe", "deepseek2"}) {
    models.emplace_back(absl::StrCat("micro-", arch, ".gguf"), MicroModel(arch));
  }
  return models;
}

std::string MicroModel(absl::string_view arch) {
  return absl::StrCat(MOE_SOURCE_DIR, "/tests/fuzz/seeds/micro-", arch, ".gguf");
}

namespace {

// Walks GGUF bytes, recording integer fields; every read is bounds-checked so a seed that is not
// GGUF just yields fewer fields.
class GgufWalker {
 public:
  explicit GgufWalker(Seed* seed) : seed_(seed), b_(seed->bytes) {}

  bool Walk() {
    uint64_t version, n_tensors, n_kv;
    if (b_.size() < 4 || std::memcmp(b_.data(), "GGUF", 4) != 0) return false;
    pos_ = 4;
    if (!Int(4, &version) || !Int(8, &n_tensors) || !Int(8, &n_kv)) return false;
    for (uint64_t i = 0; i < n_kv; ++i) {
      uint64_t type;
      if (!String() || !Int(4, &type) || !Value(type, /*depth=*/0)) return false;
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      uint64_t n_dims, unused;
      if (!String() || !Int(4, &n_dims) || n_dims > 8) return false;
      for (uint64_t d = 0; d < n_dims; ++d) {
        if (!Int(8, &unused)) return false;
      }
      if (!Int(4, &unused) || !Int(8, &unused)) return false;
    }
    seed_->header_end = pos_;
    return true;
  }

 private:
  // Reads a little-endian integer and records it as a field.
  bool Int(int width, uint64_t* out, bool record = true) {
    if (pos_ + width > b_.size()) return false;
    *out = 0;
    std::memcpy(out, b_.data() + pos_, width);
    if (record) seed_->fields.push_back({pos_, width});
    pos_ += width;
    return true;
  }
  bool String(bool record = true) {
    uint64_t len;
    if (!Int(8, &len, record) || len > b_.size() - pos_) return false;
    pos_ += len;
    return true;
  }
  static int ScalarWidth(uint64_t type) {
    switch (type) {
      case 0:
      case 1:
      case 7:
        return 1;  // u8, i8, bool
      case 2:
      case 3:
        return 2;  // u16, i16
      case 4:
      case 5:
      case 6:
        return 4;  // u32, i32, f32
      case 10:
      case 11:
      case 12:
        return 8;  // u64, i64, f64
      default:
        return 0;
    }
  }
  bool Value(uint64_t type, int depth) {
    uint64_t unused;
    if (type == 8) return String();
    if (int w = ScalarWidth(type); w > 0) return Int(w, &unused);
    if (type != 9 || depth > 0) return false;
    uint64_t elem, count;
    if (!Int(4, &elem) || !Int(8, &count)) return false;
    if (elem == 8) {
      // Only the first few string lengths are worth a mutation; vocabularies have 100k of them.
      for (uint64_t i = 0; i < count; ++i) {
        if (!String(/*record=*/i < 4)) return false;
      }
      return true;
    }
    const int w = ScalarWidth(elem);
    if (w == 0 || count > (b_.size() - pos_) / w) return false;
    pos_ += count * w;
    return true;
  }

  Seed* seed_;
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

}  // namespace

void AddGgufFields(Seed* seed) { GgufWalker(seed).Walk(); }

namespace {
std::vector<std::pair<std::string, uint64_t>>& Stages() {
  static auto* stages = new std::vector<std::pair<std::string, uint64_t>>;
  return *stages;
}
}  // namespace

void CountStage(const char* stage) {
  for (auto& [name, count] : Stages()) {
    if (name == stage) {
      ++count;
      return;
    }
  }
  Stages().push_back({stage, 1});
}

std::string StageCounts() {
  std::string out;
  for (const auto& [name, count] : Stages()) absl::StrAppend(&out, " ", name, "=", count);
  return out;
}

bool IsValidUtf8(absl::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const size_t len = DecodeUtf8(text, pos, &cp);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

}  // namespace moe::fuzz
