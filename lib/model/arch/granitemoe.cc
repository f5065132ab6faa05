// IBM Granite-3.x MoE (granitemoe: granite-3.0/3.1-1b-a400m, -3b-a800m): llama-style attention
// with consecutive-pair RoPE over the whole head and an attention scale of its own
// (attention.scale), experts in every layer routed by softmax over the chosen ones, and three
// multipliers: of the token embeddings (embedding_scale), of every attention and expert output
// before it joins the residual stream (residual_scale), and the logits divided by logit_scale.
// Granite's muP-style multipliers default to 1 as in Hugging Face's GraniteMoeConfig; llama.cpp
// writes 0 for "none" where the key is optional. GraniteMoeShared (shared experts) and Granite
// without RoPE are refused; biases on the attention projections are read when the file has them.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

// A multiplier key: absent or 0 (llama.cpp's "none") is 1.
absl::StatusOr<float> Multiplier(const MetadataKeys& keys, absl::string_view key) {
  MOE_ASSIGN_OR_RETURN(const float v, keys.Float(key, 1.f));
  return v == 0.f ? 1.f : v;
}

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
    MOE_ASSIGN_OR_RETURN(const int64_t shared,
                         keys.Int("expert_shared_feed_forward_length", int64_t{0}));
    if (shared > 0) {
      return absl::UnimplementedError(
          "granitemoe with shared experts (GraniteMoeShared, expert_shared_feed_forward_length "
          "> 0) is not supported");
    }
    MOE_ASSIGN_OR_RETURN(h->embedding_scale, Multiplier(keys, "embedding_scale"));
    MOE_ASSIGN_OR_RETURN(h->residual_scale, Multiplier(keys, "residual_scale"));
    // 0 is no "none" here (the logits are divided by it): ValidateModelSpec refuses it.
    MOE_ASSIGN_OR_RETURN(h->logit_scale, keys.Float("logit_scale", 1.f));
    // 0: the usual 1 / sqrt(head_dim).
    MOE_ASSIGN_OR_RETURN(h->kq_scale, keys.Float("attention.scale", 0.f));
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
