// Tencent's Hunyuan-A13B (hunyuan-moe, 80B-A13B): llama-layout attention with NEOX RoPE over the
// whole head, each q and k head RMS-normalised with a weight after RoPE (the optional q/k/v
// biases as the file has them); every layer a mixture: softmax over the experts, the chosen
// weights renormalised and unscaled, beside a shared expert of expert_shared_feed_forward_length
// (feed_forward_length when absent). As llama.cpp's graph reads them, the routed experts are
// feed_forward_length wide. HunYuan's NTK-alpha RoPE arrives as the raised base the converter
// writes.
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class HunyuanMoe final : public Architecture {
 public:
  Arch id() const override { return Arch::kHunyuanMoe; }
  absl::string_view name() const override { return "hunyuan-moe"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->qk_norm = QkNorm::kPerHeadAfterRope;
    MOE_RETURN_IF_ERROR(RequireWholeHeadRope(name(), *h));
    MOE_ASSIGN_OR_RETURN(const int64_t ff, keys.Int("feed_forward_length", h->n_ff_expert));
    h->n_ff_expert = ff;
    MOE_ASSIGN_OR_RETURN(const int64_t shared, keys.Int("expert_shared_feed_forward_length", 0));
    h->n_ff_shared = shared > 0 ? shared : ff;
    SoftmaxRenormalisedRouting(h);
    return absl::OkStatus();
  }

  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    h->has_qkv_bias = spec.Find(LayerBiasName(0, "attn_q")) != nullptr;
  }

  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& HunyuanMoeArchitecture() {
  static const HunyuanMoe kArch;
  return kArch;
}

}  // namespace moe
