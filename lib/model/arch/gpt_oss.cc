// OpenAI's gpt-oss (20B / 120B): grouped-query attention with q/k/v and output biases, one
// attention-sink logit per head, a sliding window on alternate layers, YaRN NEOX RoPE; a router
// with a bias whose top-k logits are softmaxed among themselves; experts with biases and the
// clamped SwiGLU; no shared expert. The pre-FFN norm is stored as post_attention_norm.
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class GptOss final : public Architecture {
 public:
  Arch id() const override { return Arch::kGptOss; }
  absl::string_view name() const override { return "gpt-oss"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->has_qkv_bias = true;
    h->has_attn_out_bias = true;
    h->has_attn_sinks = true;
    MOE_ASSIGN_OR_RETURN(h->sliding_window, keys.Int("attention.sliding_window", 0));
    // llama.cpp's default period for this family when the file names none.
    MOE_ASSIGN_OR_RETURN(h->swa_period, keys.Int("attention.sliding_window_pattern", 2));
    h->has_router_bias = true;
    h->has_expert_bias = true;
    h->swiglu_clamped = true;
    // Softmax over the k chosen logits is the softmax over all of them renormalised over the k:
    // the same choice (the order is the logits') and the same weights.
    return ReadRouting(keys, {Gating::kSoftmax, /*norm_topk_prob=*/true}, h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer("post_attention_norm");
    if (h.layer_slides(layer)) p.window = h.sliding_window;
    return p;
  }
};

}  // namespace

const Architecture& GptOssArchitecture() {
  static const GptOss kArch;
  return kArch;
}

}  // namespace moe
