// Qwen1.5-MoE / Qwen2-MoE: q/k/v biases, raw top-k weights, and a shared expert scaled by
// sigmoid(w . x).
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Qwen2Moe final : public Architecture {
 public:
  Arch id() const override { return Arch::kQwen2Moe; }
  absl::string_view name() const override { return "qwen2moe"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->has_qkv_bias = true;
    h->shared_expert_gate = true;
    MOE_ASSIGN_OR_RETURN(int64_t ff, keys.Int("feed_forward_length", 0));
    MOE_ASSIGN_OR_RETURN(h->n_ff_shared, keys.Int("expert_shared_feed_forward_length", ff));
    return ReadRouting(keys, {Gating::kSoftmax, /*norm_topk_prob=*/false}, h);
  }
  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& Qwen2MoeArchitecture() {
  static const Qwen2Moe kArch;
  return kArch;
}

}  // namespace moe
