// IBM Granite-4.0-H (granitehybrid: granite-4.0-h-tiny 7B-A1B, h-small 32B-A9B), a hybrid of
// Mamba-2 layers (those whose head_count_kv entry is 0) and a few attention layers, with
// Granite's multipliers (ReadGraniteMultipliers) and experts in every layer, routed by softmax
// over the chosen ones, beside a shared expert of expert_shared_feed_forward_length. The
// attention layers use no position encoding (rope.scaling.finetuned false, as the released
// checkpoints are written) or, when the file says so, consecutive-pair RoPE over the whole head
// (Bamba-style files). Dense-only files (no experts) are not Mixture-of-Experts models and are
// refused where every family refuses them.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class GraniteHybrid final : public Architecture {
 public:
  Arch id() const override { return Arch::kGraniteHybrid; }
  absl::string_view name() const override { return "granitehybrid"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNorm;
    MOE_ASSIGN_OR_RETURN(const bool rope, keys.Bool("rope.scaling.finetuned", true));
    if (rope) {
      MOE_RETURN_IF_ERROR(RequireWholeHeadRope(name(), *h));
    } else {
      h->nope_period = 1;  // every attention layer: no RoPE
    }
    MOE_RETURN_IF_ERROR(ReadMamba2Sizes(keys, h));
    MOE_ASSIGN_OR_RETURN(std::vector<int64_t> kv_heads, keys.IntArray("attention.head_count_kv"));
    if (static_cast<int64_t>(kv_heads.size()) != h->n_layer) {
      return absl::InvalidArgumentError(absl::StrCat("granitehybrid.attention.head_count_kv has ",
                                                     kv_heads.size(), " entries for ", h->n_layer,
                                                     " layers"));
    }
    h->ssm_layers.clear();
    for (int64_t l = 0; l < h->n_layer; ++l) {
      if (kv_heads[l] == 0) h->ssm_layers.push_back(l);
    }
    MOE_RETURN_IF_ERROR(ReadGraniteMultipliers(keys, h));
    MOE_ASSIGN_OR_RETURN(h->n_ff_shared, keys.Int("expert_shared_feed_forward_length", int64_t{0}));
    SoftmaxRenormalisedRouting(h);
    return absl::OkStatus();
  }

  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    AttentionBiasesFromTensors(spec, h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    if (h.layer_ssm(layer)) p.attention = AttentionPart::kMamba2;
    return p;
  }
};

}  // namespace

const Architecture& GraniteHybridArchitecture() {
  static const GraniteHybrid kArch;
  return kArch;
}

}  // namespace moe
