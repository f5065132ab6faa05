// Liquid AI's LFM2-MoE (lfm2moe: LFM2-8B-A1B, LFM2-24B-A2B), a hybrid made for devices: most
// layers mix positions by a gated short convolution (the layers whose head_count_kv entry is 0),
// the rest attend with Qwen3's attention (a per-head RMSNorm of q and k before NEOX RoPE).
// Leading dense layers, then experts chosen by the file's gating function (sigmoid in the
// released models) with a selection bias, their weights renormalised and never scaled (as
// llama.cpp's graph fixes them); no shared expert. The final norm is named token_embd_norm.
#include "absl/strings/str_cat.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Lfm2Moe final : public Architecture {
 public:
  Arch id() const override { return Arch::kLfm2Moe; }
  absl::string_view name() const override { return "lfm2moe"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNeox;
    h->qk_norm = QkNorm::kPerHead;
    MOE_ASSIGN_OR_RETURN(h->short_conv_kernel, keys.Int("shortconv.l_cache"));
    MOE_ASSIGN_OR_RETURN(std::vector<int64_t> kv_heads, keys.IntArray("attention.head_count_kv"));
    if (static_cast<int64_t>(kv_heads.size()) != h->n_layer) {
      return absl::InvalidArgumentError(absl::StrCat("lfm2moe.attention.head_count_kv has ",
                                                     kv_heads.size(), " entries for ", h->n_layer,
                                                     " layers"));
    }
    h->short_conv_layers.clear();
    for (int64_t l = 0; l < h->n_layer; ++l) {
      if (kv_heads[l] == 0) h->short_conv_layers.push_back(l);
    }
    MOE_RETURN_IF_ERROR(ReadLeadingDenseLayers(keys, h));
    // The gating function has no default here: llama.cpp requires the key.
    MOE_RETURN_IF_ERROR(keys.Int("expert_gating_func").status());
    MOE_RETURN_IF_ERROR(ReadRouting(keys, {Gating::kSigmoid, /*norm_topk_prob=*/true}, h));
    h->norm_topk_prob = true;
    h->routed_scale = 1.f;
    h->has_selection_bias = true;
    return absl::OkStatus();
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    if (h.layer_short_conv(layer)) p.attention = AttentionPart::kShortConv;
    if (layer < h.n_layer_dense) p.ffn = FeedForwardPart::kDense;
    return p;
  }

  absl::string_view output_norm() const override { return "token_embd_norm.weight"; }
};

}  // namespace

const Architecture& Lfm2MoeArchitecture() {
  static const Lfm2Moe kArch;
  return kArch;
}

}  // namespace moe
