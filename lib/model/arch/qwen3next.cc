// Qwen3-Next (qwen3next: Qwen3-Next-80B-A3B), Qwen3.5-MoE's forerunner (ReadQwenDeltaNetHybrid):
// gated delta nets and, every full_attention_interval-th layer, gated attention with per-head
// QK-norm and plain NEOX RoPE over the first rope.dimension_count of each head; experts in
// every layer beside a sigmoid-gated shared expert. Its delta nets keep transformers' order of
// heads (value head h reads key head h / (value heads / key heads)) and take beta and alpha from
// one matrix, ssm_ba, per key head its value heads' betas then their alphas. Files from
// llama.cpp's converters before attn_qkv / attn_gate (one fused ssm_in) are refused by name.
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Qwen3Next final : public Architecture {
 public:
  Arch id() const override { return Arch::kQwen3Next; }
  absl::string_view name() const override { return "qwen3next"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->ssm_grouped_heads = true;
    return ReadQwenDeltaNetHybrid(name(), keys, h);
  }
  LayerParts Layer(const HParams& h, int layer) const override {
    return QwenDeltaNetHybridLayer(h, layer);
  }
};

}  // namespace

const Architecture& Qwen3NextArchitecture() {
  static const Qwen3Next kArch;
  return kArch;
}

}  // namespace moe
