// Switching a MoE layer's experts off (contexts and engines alike): the checked mask.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/model/model.h"

namespace moe {

// The layer's mask with `experts` switched off (empty when the set is), or an error naming what
// is wrong: a layer without routed experts, an id out of range, or a set that, with the experts
// pruned from the model, would leave the layer none.
absl::StatusOr<std::vector<bool>> ExpertMask(const Model& model, int layer,
                                             absl::Span<const int32_t> experts);

}  // namespace moe
