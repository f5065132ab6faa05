// IBM Granite-3.x MoE (granitemoe: granite-3.0/3.1-1b-a400m, -3b-a800m): llama-style attention
// with consecutive-pair RoPE over the whole head and an attention scale of its own
// (attention.scale), experts in every layer routed by softmax over the chosen ones, and three
// multipliers: of the token embeddings (embedding_scale), of every attention and expert output
// before it joins the residual stream (residual_scale), and the logits divided by logit_scale.
// The multipliers are read as granitehybrid reads them (ReadGraniteMultipliers). GraniteMoeShared
// adds a shared MLP of expert_shared_feed_forward_length beside the experts, its output under the
// residual multiplier too, as llama.cpp's graph. Granite without RoPE is refused; biases on the
// attention projections are read when the file has them.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class GraniteMoe final : public Architecture {
 public:
  Arch id() const override { return Arch::kGraniteMoe; }
  absl::string_view name() const override { return "granitemoe"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNorm;
    MOE_RETURN_IF_ERROR(RequireWholeHeadRope(name(), *h));
    MOE_ASSIGN_OR_RETURN(const bool rope, keys.Bool("rope.scaling.finetuned", true));
    if (!rope) {
      return absl::UnimplementedError("granitemoe without RoPE (rope.scaling.finetuned false)");
    }
    // GraniteMoeShared: a shared MLP of this width beside the experts (0: none).
    MOE_ASSIGN_OR_RETURN(h->n_ff_shared, keys.Int("expert_shared_feed_forward_length", int64_t{0}));
    MOE_RETURN_IF_ERROR(ReadGraniteMultipliers(keys, h));
    // Softmax over the experts, renormalised over the chosen ones: the softmax of the chosen
    // logits that transformers' GraniteMoeTopKGating computes.
    SoftmaxRenormalisedRouting(h);
    return absl::OkStatus();
  }

  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    AttentionBiasesFromTensors(spec, h);
  }

  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& GraniteMoeArchitecture() {
  static const GraniteMoe kArch;
  return kArch;
}

}  // namespace moe
