// Writes a ModelSpec as a .moe container.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "lib/base/write_progress.h"
#include "lib/model/model_spec.h"

namespace moe {

// 2: pruned experts. Files without them are still written as version 1, which every reader
// takes.
inline constexpr uint32_t kMoeFormatVersion = 2;
inline constexpr size_t kTensorAlignment = 64;
inline constexpr size_t kExpertAlignment = 4096;

// Writes to `path` atomically (a temporary file renamed into place), so a failed write never
// leaves a half-written model under the final name. progress (may be empty) is told after each
// tensor; returning false cancels (CANCELLED, no file).
absl::Status WriteMoeFile(const ModelSpec& spec, const std::string& path,
                          const WriteProgress& progress = {});

}  // namespace moe
