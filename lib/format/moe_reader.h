// Reads a .moe container: mmap, FlatBuffers verification, then every semantic check (offsets and
// sizes inside the file, shape x dtype = size, alignment) before anything is used.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/model/model_spec.h"

namespace moe {

absl::StatusOr<ModelSpec> ReadMoeFile(const std::string& path);

// True when the bytes start like a .moe file (size prefix + identifier).
bool LooksLikeMoeFile(absl::Span<const uint8_t> head);
// Whether head, shorter than the identifier's end, could be the start of a .moe file that was
// cut: too short to tell, and its bytes up to the identifier's position agree with it.
bool MayBeCutMoeFile(absl::Span<const uint8_t> head);

}  // namespace moe
