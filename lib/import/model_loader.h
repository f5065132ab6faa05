// Opens any model file the runtime understands, recognised by its content, not its name:
// a .moe container, a GGUF file or a Hugging Face checkpoint directory (converted in memory).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/model/model_spec.h"

namespace moe {

enum class ModelFileKind {
  kMissing,     // no such file or directory
  kUnreadable,  // exists, but cannot be opened or read
  kDirectory,   // a directory that is not a Hugging Face checkpoint (no config.json)
  kTruncated,   // too short to tell, and its bytes begin like one of our formats (or it is empty)
  kGguf,
  kMoe,
  kHfCheckpoint,
  kOther  // a file of some other kind
};

// What `path` holds, judged by its first bytes (or, for a directory, its config.json).
ModelFileKind DetectModelFile(const std::string& path);

// The error for a path that is none of the model kinds, in the classes moe_c.h documents:
// NotFound (missing), PermissionDenied (unreadable), InvalidArgument (a directory), DataLoss
// (truncated), Unimplemented (another kind of file). `expected` names what would have been read.
absl::Status NotAModelError(ModelFileKind kind, const std::string& path,
                            const std::string& expected);

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path);

}  // namespace moe
