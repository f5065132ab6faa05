// rednote-hilab's dots.llm1 (dots1: 142B-A14B): Qwen3's attention (a per-head RMSNorm of q and k
// before NEOX RoPE), leading dense layers, then routed experts chosen as DeepSeek-V3 chooses them
// (the file's gating, sigmoid when absent, with the optional selection bias, groups, weight
// normalisation and scale) beside shared experts of the routed experts' width.
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Dots1 final : public Architecture {
 public:
  Arch id() const override { return Arch::kDots1; }
  absl::string_view name() const override { return "dots1"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->qk_norm = QkNorm::kPerHead;
    MOE_RETURN_IF_ERROR(ReadLeadingDenseLayers(keys, h));
    MOE_RETURN_IF_ERROR(ReadSharedExperts(keys, h));
    return ReadRouting(keys, {Gating::kSigmoid, /*norm_topk_prob=*/false}, h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    if (layer < h.n_layer_dense) p.ffn = FeedForwardPart::kDense;
    return p;
  }
};

}  // namespace

const Architecture& Dots1Architecture() {
  static const Dots1 kArch;
  return kArch;
}

}  // namespace moe
