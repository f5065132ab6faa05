// DeepSeek-MoE (deepseek: deepseek-moe-16b-base / -chat, and the models that reuse its layout):
// llama-style attention with consecutive-pair RoPE over the whole head, leading dense layers,
// then in every layer softmax routing over all experts whose chosen weights are neither
// renormalised nor (but by expert_weights_scale) scaled, beside expert_shared_count shared
// experts of the experts' width run as one FFN — as llama.cpp's graph fixes the routing,
// whatever other routing keys a file carries.
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Deepseek final : public Architecture {
 public:
  Arch id() const override { return Arch::kDeepseek; }
  absl::string_view name() const override { return "deepseek"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNorm;
    MOE_RETURN_IF_ERROR(RequireWholeHeadRope(name(), *h));
    MOE_RETURN_IF_ERROR(ReadLeadingDenseLayers(keys, h));
    MOE_RETURN_IF_ERROR(ReadSharedExperts(keys, h));
    h->gating = Gating::kSoftmax;
    h->norm_topk_prob = false;
    return ReadRoutedScale(keys, h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    if (layer < h.n_layer_dense) p.ffn = FeedForwardPart::kDense;
    return p;
  }
};

}  // namespace

const Architecture& DeepseekArchitecture() {
  static const Deepseek kArch;
  return kArch;
}

}  // namespace moe
