// MiniMax-M2 (minimax-m2: 230B-A10B): grouped-query attention with an RMSNorm over the whole q and
// k projections (all heads at once, as OLMoE's) before a partial NEOX RoPE (rope.dimension_count
// of head_dim), then in every layer sigmoid routing chosen with the selection bias exp_probs_b,
// the chosen weights renormalised, no shared expert. As llama.cpp's graph, the renormalisation is
// the family's own and no routed scale is applied; the gating function is the file's (sigmoid
// when absent).
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class MinimaxM2 final : public Architecture {
 public:
  Arch id() const override { return Arch::kMinimaxM2; }
  absl::string_view name() const override { return "minimax-m2"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    MOE_RETURN_IF_ERROR(ReadRouting(keys, {Gating::kSigmoid, /*norm_topk_prob=*/true}, h));
    h->norm_topk_prob = true;
    h->routed_scale = 1.f;
    return absl::OkStatus();
  }

  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    h->qk_norm = QkNormFromTensors(spec, *h);
  }

  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& MinimaxM2Architecture() {
  static const MinimaxM2 kArch;
  return kArch;
}

}  // namespace moe
