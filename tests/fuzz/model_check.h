// What the model-file targets do with a spec that parsed: check that every tensor lies inside
// bytes the spec owns and has the size its shape says, build the Model, and run one forward
// step on a tiny batch. A damaged file that gets this far must still never read out of bounds.
#pragma once

#include "absl/types/span.h"
#include "lib/model/model_spec.h"

namespace moe::fuzz {

// `file`: the bytes the spec was parsed from when its tensors must point into them (GGUF parsed
// in memory); empty when they live in a mapping the spec owns (.moe).
void CheckSpecAndRun(ModelSpec spec, absl::Span<const uint8_t> file);

}  // namespace moe::fuzz
