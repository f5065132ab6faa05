// NVIDIA Nemotron-H MoE (nemotron_h_moe: Nemotron-3-Nano-30B-A3B), a hybrid whose layers each have
// one part after their attn_norm: a Mamba-2 mixer (head_count_kv and feed_forward_length entries
// both 0), attention without position encoding (head_count_kv > 0, feed_forward_length 0), or a
// mixture of ungated relu^2 experts beside a relu^2 shared expert (feed_forward_length > 0),
// llama.cpp's rule for telling them apart. Routing is sigmoid with the selection bias
// exp_probs_b, renormalised and scaled as the file says (llama.cpp's graph fixes the sigmoid
// whatever expert_gating_func says). The larger models (Nemotron 3 Super) run their routed experts
// in a latent space of moe_latent_size (HParams::moe_latent_dim). Files with no Mamba-2 layer are
// refused.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class NemotronHMoe final : public Architecture {
 public:
  Arch id() const override { return Arch::kNemotronHMoe; }
  absl::string_view name() const override { return "nemotron_h_moe"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    MOE_ASSIGN_OR_RETURN(h->moe_latent_dim, keys.Int("moe_latent_size", int64_t{0}));
    h->nope_period = 1;  // no attention layer rotates
    MOE_RETURN_IF_ERROR(ReadMamba2Sizes(keys, h));
    MOE_ASSIGN_OR_RETURN(const std::vector<int64_t> kv_heads,
                         keys.IntArray("attention.head_count_kv"));
    MOE_ASSIGN_OR_RETURN(const std::vector<int64_t> ff, keys.IntArray("feed_forward_length"));
    for (const auto* list : {&kv_heads, &ff}) {
      if (static_cast<int64_t>(list->size()) != h->n_layer) {
        return absl::InvalidArgumentError(absl::StrCat(
            "nemotron_h_moe.", list == &ff ? "feed_forward_length" : "attention.head_count_kv",
            " has ", list->size(), " entries for ", h->n_layer, " layers"));
      }
    }
    h->ssm_layers.clear();
    h->mixer_only_layers.clear();
    h->ffn_only_layers.clear();
    for (int64_t l = 0; l < h->n_layer; ++l) {
      if (ff[l] > 0) {
        if (ff[l] != h->n_ff_expert) {
          return absl::UnimplementedError(
              absl::StrCat("nemotron_h_moe layer ", l, " has feed_forward_length ", ff[l],
                           " but the experts' width is ", h->n_ff_expert,
                           ": dense MLP layers are not supported"));
        }
        h->ffn_only_layers.push_back(l);
        continue;
      }
      h->mixer_only_layers.push_back(l);
      if (kv_heads[l] == 0) h->ssm_layers.push_back(l);
    }
    if (h->ssm_layers.empty() || h->ffn_only_layers.empty()) {
      return absl::UnimplementedError(
          "nemotron_h_moe without Mamba-2 or expert layers is not a hybrid MoE model");
    }
    MOE_ASSIGN_OR_RETURN(h->kq_scale, keys.Float("attention.scale", 0.f));
    MOE_ASSIGN_OR_RETURN(h->n_ff_shared, keys.Int("expert_shared_feed_forward_length", int64_t{0}));
    MOE_RETURN_IF_ERROR(ReadRouting(keys, {Gating::kSigmoid, false}, h));
    h->gating = Gating::kSigmoid;
    h->relu_squared_ffn = true;
    return absl::OkStatus();
  }

  void FromTensors(const ModelSpec& spec, HParams* h) const override {
    AttentionBiasesFromTensors(spec, h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer("attn_norm");
    if (h.layer_ffn_only(layer)) {
      p.attention = AttentionPart::kNone;
      return p;
    }
    p.ffn = FeedForwardPart::kNone;
    if (h.layer_ssm(layer)) p.attention = AttentionPart::kMamba2;
    return p;
  }
};

}  // namespace

const Architecture& NemotronHMoeArchitecture() {
  static const NemotronHMoe kArch;
  return kArch;
}

}  // namespace moe
