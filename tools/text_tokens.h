// A text file as the model's tokens, BOS first when the model has one: what `moe-cli profile`
// routes and `moe-bench --text` runs; and a whole file's bytes, for the tools that read one.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/runtime/engine.h"

namespace moe::cli {

// A whole file's bytes, or NotFound naming it.
inline absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

inline absl::StatusOr<std::vector<int32_t>> ReadTextTokens(const Engine& engine,
                                                           const std::string& path) {
  auto tok = engine.RequireTokenizer();
  if (!tok.ok()) return tok.status();
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  std::vector<int32_t> ids = (*tok)->Encode(*text);
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat("'", path, "' is empty"));
  if ((*tok)->bos_id() >= 0) ids.insert(ids.begin(), (*tok)->bos_id());
  return ids;
}

}  // namespace moe::cli
