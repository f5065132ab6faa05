// OLMoE: RMSNorm over the whole q and k projections (not per head), raw top-k weights.
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Olmoe final : public Architecture {
 public:
  Arch id() const override { return Arch::kOlmoe; }
  absl::string_view name() const override { return "olmoe"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->qk_norm = QkNorm::kFull;
    return ReadRouting(keys, {Gating::kSoftmax, /*norm_topk_prob=*/false}, h);
  }
  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& OlmoeArchitecture() {
  static const Olmoe kArch;
  return kArch;
}

}  // namespace moe
