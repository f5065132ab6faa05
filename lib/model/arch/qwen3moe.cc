// Qwen3-MoE: per-head QK-norm before RoPE, renormalised top-k weights, no shared expert.
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Qwen3Moe final : public Architecture {
 public:
  Arch id() const override { return Arch::kQwen3Moe; }
  absl::string_view name() const override { return "qwen3moe"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->qk_norm = QkNorm::kPerHead;
    return ReadRouting(keys, {Gating::kSoftmax, /*norm_topk_prob=*/true}, h);
  }
  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& Qwen3MoeArchitecture() {
  static const Qwen3Moe kArch;
  return kArch;
}

}  // namespace moe
