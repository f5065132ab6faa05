#include "tools/moe-cli/token_ids.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moe::cli {

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text) {
  std::vector<int32_t> ids;
  for (absl::string_view field :
       absl::StrSplit(text, absl::ByAnyChar(" ,\t\r\n"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(field, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("'", field, "' is not a token id"));
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace moe::cli
