// A model's hyper-parameters from llama.cpp's metadata keys: the keys every family shares, RoPE
// scaling, then the family's own (lib/model/arch/). GGUF files state these keys directly; a Hugging
// Face config.json is first seen through the keys llama.cpp's converter would write from it
// (hf_metadata.h), so both formats go through the same family rules.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/model/arch/architecture.h"
#include "lib/model/model_spec.h"

namespace moe {

// `rope_scaling_type` is rope.scaling.type: empty when a file has none, which llama.cpp reads as
// "linear" (with a factor that is not 1, refused here). n_vocab, tied_output and
// what a family reads from tensors are left to the caller.
absl::StatusOr<HParams> HParamsFromKeys(const MetadataKeys& keys,
                                        absl::string_view rope_scaling_type,
                                        const Architecture& arch);

}  // namespace moe
