// Token ids as people type them on a command line or keep them in a file: integers separated
// by spaces, commas, tabs or newlines.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe::cli {

// InvalidArgument naming the first field that is not an integer. Range checks are the model's.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text);

}  // namespace moe::cli
