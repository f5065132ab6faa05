#include "lib/runtime/expert_mask.h"

#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<std::vector<bool>> ExpertMask(const Model& model, int layer,
                                             absl::Span<const int32_t> experts) {
  const HParams& h = model.hp();
  if (layer < 0 || layer >= h.n_layer ||
      model.layers()[layer].parts.ffn != FeedForwardPart::kMixture) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer, " has no routed experts (the model's MoE layers are among 0..",
        h.n_layer - 1, ")"));
  }
  std::vector<bool> off(h.n_expert, false);
  int64_t n_off = 0;
  for (int32_t e : experts) {
    if (e < 0 || e >= h.n_expert) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert ", e, " is outside [0, ", h.n_expert, ")"));
    }
    n_off += !off[e];
    off[e] = true;
  }
  int64_t n_gone = 0;  // switched off or pruned from the model
  for (int e = 0; e < h.n_expert; ++e) n_gone += off[e] || model.pruned_experts()[layer][e];
  if (n_gone == h.n_expert) {
    return absl::InvalidArgumentError(absl::StrCat("switching off these experts would leave layer ",
                                                   layer, " with none (of its ", h.n_expert, ", ",
                                                   n_gone - n_off, " are pruned from the model)"));
  }
  if (n_off == 0) off.clear();
  return off;
}

}  // namespace moe
