// Mixtral (GGUF "llama" with experts): a llama block whose FFN is a mixture; consecutive-pair
// RoPE, top-k weights renormalised.
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Llama final : public Architecture {
 public:
  Arch id() const override { return Arch::kLlama; }
  absl::string_view name() const override { return "llama"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNorm;
    return ReadRouting(keys, {Gating::kSoftmax, /*norm_topk_prob=*/true}, h);
  }
  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& LlamaArchitecture() {
  static const Llama kArch;
  return kArch;
}

}  // namespace moe
