// GGUF model file -> ModelSpec. Tensor data stays in the mapped file (zero copy); stacked expert
// tensors are split into one tensor per expert. A model split by gguf-split is imported from the
// first split's path, the others read from beside it (gguf_split.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/import/gguf_file.h"
#include "lib/model/model_spec.h"

namespace moe {

absl::StatusOr<ModelSpec> ImportGguf(const std::string& path);
absl::StatusOr<ModelSpec> ImportGguf(std::shared_ptr<const GgufFile> gguf);

}  // namespace moe
