// Qwen3-VL-MoE's language model, for text: Qwen3-MoE's layers with interleaved multimodal RoPE
// (llama.cpp's IMROPE over rope.dimension_sections). A text token's temporal, height and width
// positions are all its position, so the pairs of those sections turn as plain RoPE's do; the
// pairs llama.cpp gives the extra section see position 0 and do not turn (RopeFor). Deepstack
// (image features added to the first layers' outputs) adds nothing to text. Images are not
// supported.
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Qwen3VlMoe final : public Architecture {
 public:
  Arch id() const override { return Arch::kQwen3VlMoe; }
  absl::string_view name() const override { return "qwen3vlmoe"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    MOE_RETURN_IF_ERROR(Qwen3MoeArchitecture().ReadMetadata(keys, h));
    return ReadRopeSections(name(), keys, h);
  }
  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& Qwen3VlMoeArchitecture() {
  static const Qwen3VlMoe kArch;
  return kArch;
}

}  // namespace moe
