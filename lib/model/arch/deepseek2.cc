// DeepSeek-V2 / V2-Lite / V3 (and the models that reuse the architecture): multi-head latent
// attention with consecutive-pair RoPE on a separate part of q and k, YaRN with DeepSeek's
// attention temperature, leading dense layers, shared experts, and routing by softmax (V2) or
// sigmoid with a selection bias and group limit (V3), renormalised and scaled as the file says.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

class Deepseek2 final : public Architecture {
 public:
  Arch id() const override { return Arch::kDeepseek2; }
  absl::string_view name() const override { return "deepseek2"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNorm;
    // The file's key/value sizes are those of the one latent "KV head" llama.cpp caches
    // (kv_lora_rank + rope dims, kv_lora_rank); the per-head sizes have keys of their own.
    // q_lora_rank 0 and absent alike mean q straight from attn_q (V2-Lite).
    MOE_ASSIGN_OR_RETURN(h->q_lora_rank, keys.Int("attention.q_lora_rank", 0));
    MOE_ASSIGN_OR_RETURN(h->kv_lora_rank, keys.Int("attention.kv_lora_rank"));
    int64_t k_mla = 0;
    if (keys.Has("attention.key_length_mla")) {
      MOE_ASSIGN_OR_RETURN(k_mla, keys.Int("attention.key_length_mla"));
      MOE_ASSIGN_OR_RETURN(h->v_head_dim, keys.Int("attention.value_length_mla"));
    } else {
      // Converted before llama.cpp's absorbed layout: the keys give the per-head sizes and the
      // file stores attn_kv_b whole (the importer splits it: lib/import/legacy_latent_kv.h).
      // The runtime's sizes are those of the one latent "KV head", as in current files.
      if (!keys.Has("attention.key_length") || !keys.Has("attention.value_length")) {
        return absl::InvalidArgumentError(
            "this DeepSeek file has neither attention.key_length_mla nor both "
            "attention.key_length and attention.value_length: the heads' sizes are unknown");
      }
      k_mla = h->head_dim;
      h->v_head_dim = h->value_dim;
      h->head_dim = h->kv_lora_rank + h->rope_dim;
      h->value_dim = h->kv_lora_rank;
      h->n_head_kv = 1;
    }
    h->qk_nope_dim = k_mla - h->rope_dim;
    if (h->kv_lora_rank <= 0 || h->qk_nope_dim <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("latent attention: kv_lora_rank ",
                                                     h->kv_lora_rank, ", key_length_mla ", k_mla,
                                                     " with ", h->rope_dim, " rotary dimensions"));
    }
    // llama.cpp cancels YaRN's cos/sin magnitude for this family and puts DeepSeek's
    // temperature, mscale^2, into the attention scale instead.
    const float mscale = h->rope_attn_factor * (1.f + h->yarn_log_mul * std::log(h->yarn_factor));
    h->kq_scale = mscale * mscale / std::sqrt(static_cast<float>(k_mla));
    h->rope_attn_factor = 1.f / (1.f + 0.1f * std::log(h->yarn_factor));
    // Mistral-Large-3-style attention temperature (queries scaled by a function of position).
    MOE_ASSIGN_OR_RETURN(const float temperature, keys.Float("attention.temperature_scale", 0.f));
    if (temperature != 0.f) {
      return absl::UnimplementedError(
          absl::StrCat("attention.temperature_scale ", temperature,
                       " (queries scaled by position, as Mistral Large 3 does) is not supported"));
    }
    MOE_RETURN_IF_ERROR(ReadLeadingDenseLayers(keys, h));
    MOE_RETURN_IF_ERROR(ReadSharedExperts(keys, h));
    return ReadRouting(keys, {Gating::kSoftmax, /*norm_topk_prob=*/false}, h);
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    p.attention = AttentionPart::kLatent;
    if (layer < h.n_layer_dense) p.ffn = FeedForwardPart::kDense;
    return p;
  }
};

}  // namespace

const Architecture& Deepseek2Architecture() {
  static const Deepseek2 kArch;
  return kArch;
}

}  // namespace moe
