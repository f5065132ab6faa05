// GLM-4.5 / 4.6 (glm4moe): partial NEOX RoPE (rope.dimension_count of head_dim), q/k/v biases,
// optional per-head QK-norm, leading dense layers, sigmoid routing with a selection bias,
// renormalised and scaled weights, one ungated shared expert. The multi-token-prediction blocks
// a file carries after the last layer (nextn_predict_layers) are not run.
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Glm4Moe final : public Architecture {
 public:
  Arch id() const override { return Arch::kGlm4Moe; }
  absl::string_view name() const override { return "glm4moe"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->has_qkv_bias = true;
    MOE_RETURN_IF_ERROR(ReadLeadingDenseLayers(keys, h));
    MOE_RETURN_IF_ERROR(ReadSharedExperts(keys, h));
    MOE_RETURN_IF_ERROR(ReadNextnLayers(keys, h));
    return ReadRouting(keys, {Gating::kSigmoid, /*norm_topk_prob=*/false}, h);
  }
  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    h->qk_norm = QkNormFromTensors(spec, *h);
  }
  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer("post_attention_norm");
    if (layer < h.n_layer_dense) p.ffn = FeedForwardPart::kDense;
    return p;
  }
};

}  // namespace

const Architecture& Glm4MoeArchitecture() {
  static const Glm4Moe kArch;
  return kArch;
}

}  // namespace moe
