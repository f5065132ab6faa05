// Ant Group's Ling 2.0 / Ring 2.0 (bailingmoe2: Ling-mini-2.0 16B-A1.4B, Ling-flash-2.0
// 100B-A6B): llama-style attention stored as one fused q/k/v matrix (split at load), partial NEOX
// RoPE (rope.dimension_count of head_dim) after a per-head QK-norm, leading dense layers, then
// sigmoid routing chosen with the selection bias exp_probs_b among the best expert groups,
// renormalised and scaled, beside shared experts. The multi-token-prediction blocks a file carries
// after the last layer (nextn_predict_layers) are not run. The converters always write the gating
// function and shared-expert count; absent, they read as sigmoid and none.
#include "absl/strings/str_cat.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class BailingMoe2 final : public Architecture {
 public:
  Arch id() const override { return Arch::kBailingMoe2; }
  absl::string_view name() const override { return "bailingmoe2"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    MOE_RETURN_IF_ERROR(ReadLeadingDenseLayers(keys, h));
    MOE_RETURN_IF_ERROR(ReadNextnLayers(keys, h));
    // Each shared expert is expert_shared_feed_forward_length wide (absent or 0: the routed
    // experts' width); they run as one FFN.
    MOE_ASSIGN_OR_RETURN(const int64_t count, keys.Int("expert_shared_count", 0));
    MOE_ASSIGN_OR_RETURN(int64_t width, keys.Int("expert_shared_feed_forward_length", 0));
    if (width == 0) width = h->n_ff_expert;
    if (count < 0 || count > 1024 || width < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert_shared_count ", count, " / expert_shared_feed_forward_length ", width));
    }
    h->n_ff_shared = count * width;
    return ReadRouting(keys, {Gating::kSigmoid, /*norm_topk_prob=*/false}, h);
  }

  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    h->qk_norm = QkNormFromTensors(spec, *h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    if (layer < h.n_layer_dense) p.ffn = FeedForwardPart::kDense;
    return p;
  }
};

}  // namespace

const Architecture& BailingMoe2Architecture() {
  static const BailingMoe2 kArch;
  return kArch;
}

}  // namespace moe
