// GraniteMoeForCausalLM (granite-3.0/3.1-*-a*m) and GraniteMoeSharedForCausalLM (with a shared
// MLP of shared_intermediate_size) config.json -> granitemoe keys, with
// GraniteMoeConfig's defaults and the keys llama.cpp's GraniteMoeModel converter writes: the
// multipliers (embedding_multiplier, residual_multiplier, logits_scaling, attention_multiplier)
// as embedding_scale, residual_scale, logit_scale and attention.scale.
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status GraniteMoeKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {2048, 1e-6, 10000.0}, &k));
  MOE_ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(int64_t kv_heads, c.Int("num_key_value_heads", heads));
  k.SetInt("attention.head_count_kv", kv_heads);
  MOE_ASSIGN_OR_RETURN(double theta, RopeTheta(j, 10000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  MOE_ASSIGN_OR_RETURN(bool bias, c.Bool("attention_bias", false));
  if (bias) {
    return absl::UnimplementedError(
        "config.json attention_bias true is not supported for GraniteMoeForCausalLM");
  }
  MOE_ASSIGN_OR_RETURN(int64_t experts, c.Int("num_local_experts", 8));
  MOE_ASSIGN_OR_RETURN(int64_t used, c.Int("num_experts_per_tok", 2));
  MOE_ASSIGN_OR_RETURN(int64_t ff, c.Int("intermediate_size", 11008));
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("feed_forward_length", ff);
  k.SetInt("expert_feed_forward_length", ff);
  MOE_ASSIGN_OR_RETURN(int64_t shared, c.Int("shared_intermediate_size", 0));
  k.SetInt("expert_shared_feed_forward_length", shared);  // GraniteMoeShared's
  out->refine = RotateHalfRope;
  return SetGraniteMultiplierKeys(c, &k);
}

absl::Status RotateHalfRope(HParams* h) {
  h->rope_style = RopeStyle::kNeox;
  return absl::OkStatus();
}

absl::Status SetGraniteMultiplierKeys(const ConfigJson& c, HfMetadataKeys* k) {
  constexpr std::pair<const char*, const char*> kMultipliers[] = {
      {"embedding_multiplier", "embedding_scale"},
      {"residual_multiplier", "residual_scale"},
      {"logits_scaling", "logit_scale"},
      {"attention_multiplier", "attention.scale"}};
  for (const auto& [config_key, gguf_key] : kMultipliers) {
    MOE_ASSIGN_OR_RETURN(double v, c.Float(config_key, 1.0));
    k->SetFloat(gguf_key, v);
  }
  return absl::OkStatus();
}

}  // namespace moe
