// Opens any model file the runtime understands, recognised by its content, not its name:
// a .moe container, a GGUF file or a Hugging Face checkpoint directory (converted in memory).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/model/model_spec.h"

namespace moe {

enum class ModelFileKind { kUnreadable, kGguf, kMoe, kHfCheckpoint, kOther };

// What `path` holds, judged by its first bytes (or, for a directory, its config.json).
ModelFileKind DetectModelFile(const std::string& path);

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path);

}  // namespace moe
