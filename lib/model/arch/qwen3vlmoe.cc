// Qwen3-VL-MoE's language model, for text: Qwen3-MoE's layers with interleaved multimodal RoPE
// (llama.cpp's IMROPE over rope.dimension_sections). A text token's temporal, height and width
// positions are all its position, so the pairs of those sections turn as plain RoPE's do; the
// pairs llama.cpp gives the extra section see position 0 and do not turn (RopeFor). Deepstack
// (image features added to the first layers' outputs) adds nothing to text. Images are not
// supported.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"

namespace moe {
namespace {

class Qwen3VlMoe final : public Architecture {
 public:
  Arch id() const override { return Arch::kQwen3VlMoe; }
  absl::string_view name() const override { return "qwen3vlmoe"; }
  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    MOE_RETURN_IF_ERROR(Qwen3MoeArchitecture().ReadMetadata(keys, h));
    auto sections = keys.IntArray("rope.dimension_sections");
    if (!sections.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("qwen3vlmoe needs rope.dimension_sections: ", sections.status().message()));
    }
    if (sections->size() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.dimension_sections has ", sections->size(), " values, not 4"));
    }
    int64_t sum = 0;
    for (int i = 0; i < 4; ++i) {
      if ((*sections)[i] < 0 || (*sections)[i] > (int64_t{1} << 20)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rope.dimension_sections [", absl::StrJoin(*sections, ", "), "]"));
      }
      h->rope_sections[i] = (*sections)[i];
      sum += (*sections)[i];
    }
    if (sum == 0) return absl::InvalidArgumentError("rope.dimension_sections are all 0");
    return absl::OkStatus();
  }
  LayerParts Layer(const HParams&, int) const override { return MixtureLayer(); }
};

}  // namespace

const Architecture& Qwen3VlMoeArchitecture() {
  static const Qwen3VlMoe kArch;
  return kArch;
}

}  // namespace moe
