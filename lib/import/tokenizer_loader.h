// Loads the tokenizer data of a model file, whatever its format.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/tokenizer/tokenizer_data.h"

namespace moe {

// path: a .gguf file (vocabulary-only ones included) or a Hugging Face tokenizer.json (with its
// tokenizer_config.json beside it when present), or a .moe container.
absl::StatusOr<TokenizerData> LoadTokenizerData(const std::string& path);

}  // namespace moe
