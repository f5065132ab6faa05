// JSON text parsed with an error that says where it goes wrong. Parsed without exceptions, a
// hand-edited placement file or config.json with one stray comma was only "not valid JSON",
// leaving the user to search the whole file. Include only from targets that link
// nlohmann_json (it is header-only).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moe {

// The document, or InvalidArgument "not valid JSON: parse error at line L, column C: ..." (the
// parser's words, without its "[json.exception.parse_error.N] " tag). Callers add which file.
inline absl::StatusOr<nlohmann::json> ParseJsonText(absl::string_view text) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    absl::string_view why = e.what();
    if (absl::StartsWith(why, "[json.exception.")) {
      const size_t end = why.find("] ");
      if (end != absl::string_view::npos) why.remove_prefix(end + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", why));
  }
}

}  // namespace moe
