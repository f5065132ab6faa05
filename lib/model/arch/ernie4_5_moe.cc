// ERNIE-4.5 MoE (ernie4_5-moe: ERNIE-4.5-21B-A3B, -300B-A47B): llama-style grouped-query
// attention with consecutive-pair RoPE over the whole head (q/k/v biases when the file has
// them), leading dense layers, then experts in every interleave_moe_layer_step-th layer (dense
// FFNs between), softmax routing whose choice adds the selection bias exp_probs_b, weights
// renormalised over the chosen experts, and shared experts run as one FFN of
// expert_shared_feed_forward_length. As llama.cpp, the routing is fixed: the file's gating,
// weight-norm and weight-scale keys are not read. The multi-token-prediction layers of the
// Hugging Face checkpoints are not in GGUF files.
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Ernie45Moe final : public Architecture {
 public:
  Arch id() const override { return Arch::kErnie45Moe; }
  absl::string_view name() const override { return "ernie4_5-moe"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNorm;
    MOE_RETURN_IF_ERROR(RequireWholeHeadRope(name(), *h));
    MOE_RETURN_IF_ERROR(ReadLeadingDenseLayers(keys, h));
    MOE_RETURN_IF_ERROR(ReadExpertLayerStep(keys, h));
    // The converter writes the shared experts' whole width (not a count of expert widths).
    MOE_ASSIGN_OR_RETURN(h->n_ff_shared, keys.Int("expert_shared_feed_forward_length", 0));
    SoftmaxRenormalisedRouting(h);
    return absl::OkStatus();
  }

  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    // llama.cpp loads an output-projection bias for this family but does not add it; Hugging
    // Face's model (use_bias) does. No released checkpoint has one.
    AttentionBiasesFromTensors(spec, h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    if (!h.layer_has_experts(layer)) p.ffn = FeedForwardPart::kDense;
    return p;
  }
};

}  // namespace

const Architecture& Ernie45MoeArchitecture() {
  static const Ernie45Moe kArch;
  return kArch;
}

}  // namespace moe
