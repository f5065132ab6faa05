// Reads the tokenizer.ggml.* metadata of a GGUF file into TokenizerData.
#pragma once

#include "absl/status/statusor.h"
#include "lib/import/gguf_file.h"
#include "lib/tokenizer/tokenizer_data.h"

namespace moe {

absl::StatusOr<TokenizerData> TokenizerDataFromGguf(const GgufFile& gguf);

}  // namespace moe
