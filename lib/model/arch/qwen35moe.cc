// Qwen3.5 / Qwen3.6 MoE (qwen35moe: Qwen3.5-35B-A3B, -122B-A10B, -397B-A17B), a hybrid of gated
// delta nets and, every full_attention_interval-th layer, gated attention: Qwen3's per-head
// QK-norm and interleaved multimodal RoPE over the first rope.dimension_count of each head, the
// output multiplied by sigmoid of a gate that attn_q yields beside q. Every layer has experts,
// chosen by softmax and renormalised, beside a shared expert scaled by sigmoid(w . x); the
// feed-forward norm is named post_attention_norm (ReadQwenDeltaNetHybrid). The gated delta net
// (HParams' ssm_* comment) reuses the Mamba-2 keys llama.cpp reads for it; value head h reads
// key head h mod key heads, as llama.cpp's converter lays the value heads out. The
// multi-token-prediction block is not run.
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Qwen35Moe final : public Architecture {
 public:
  Arch id() const override { return Arch::kQwen35Moe; }
  absl::string_view name() const override { return "qwen35moe"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    MOE_RETURN_IF_ERROR(ReadRopeSections(name(), keys, h));
    return ReadQwenDeltaNetHybrid(name(), keys, h);
  }
  LayerParts Layer(const HParams& h, int layer) const override {
    return QwenDeltaNetHybridLayer(h, layer);
  }
};

}  // namespace

const Architecture& Qwen35MoeArchitecture() {
  static const Qwen35Moe kArch;
  return kArch;
}

}  // namespace moe
