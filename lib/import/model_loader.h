// Opens any model file the runtime understands, recognised by its content, not its name:
// a .moe container, a GGUF file or a Hugging Face checkpoint directory (converted in memory).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/model/model_spec.h"

namespace moe {

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path);

}  // namespace moe
