// Lfm2MoeForCausalLM (LiquidAI's LFM2-8B-A1B, LFM2-24B-A2B) config.json -> lfm2moe keys, as
// llama.cpp's LFM2MoeModel converter writes them: layer_types gives each layer's kind (a
// "full_attention" layer attends, any other convolves: head_count_kv 0), conv_L_cache the
// convolution's length, num_dense_layers the leading dense layers, routing by sigmoid. What a
// GGUF cannot state and llama.cpp's graph fixes (renormalised, unscaled, with the expert bias)
// is taken from config.json as transformers reads it: norm_topk_prob, routed_scaling_factor,
// use_expert_bias (the published configs give llama.cpp's values). Convolution biases
// (conv_bias), which llama.cpp does not read, are refused.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status Lfm2MoeKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {128000, 1e-5, 1e6}, &k));
  MOE_ASSIGN_OR_RETURN(const double eps, c.Float("norm_eps", 1e-5));  // LFM2's name for it
  k.SetFloat("attention.layer_norm_rms_epsilon", eps);
  MOE_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(const int64_t kv_heads, c.Int("num_key_value_heads", 8));
  MOE_RETURN_IF_ERROR(SetHeadKeys(c, 8, &k).status());
  // A "full_attention" layer attends; any other convolves.
  MOE_RETURN_IF_ERROR(SetLayerKindKeys(c, layers, kv_heads, "full_attention", "", &k));
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 1e6));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  MOE_ASSIGN_OR_RETURN(const bool conv_bias, c.Bool("conv_bias", false));
  if (conv_bias) {
    return absl::UnimplementedError(
        "config.json conv_bias true (biases on the short convolutions) is not supported");
  }
  MOE_ASSIGN_OR_RETURN(const int64_t kernel, c.Int("conv_L_cache", 3));
  k.SetInt("shortconv.l_cache", kernel);
  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("num_experts", 32));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok", 4));
  MOE_ASSIGN_OR_RETURN(const int64_t ff, c.Int("intermediate_size", 7168));
  MOE_ASSIGN_OR_RETURN(const int64_t moe_ff, c.Int("moe_intermediate_size", 1792));
  MOE_ASSIGN_OR_RETURN(const int64_t dense, c.Int("num_dense_layers", 2));
  MOE_ASSIGN_OR_RETURN(const bool norm, c.Bool("norm_topk_prob", true));
  MOE_ASSIGN_OR_RETURN(const double scale, c.Float("routed_scaling_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(out->selection_bias, c.Bool("use_expert_bias", true));
  SetMixtureKeys({experts, used, ff, moe_ff, 0, dense, norm, scale, 1, 1, 2}, &k);
  out->qk_norm = QkNorm::kPerHead;
  // Lfm2MoeConfig reads the original configs' tie_embedding as tie_word_embeddings.
  MOE_ASSIGN_OR_RETURN(out->tied_output_default, c.Bool("tie_embedding", true));
  out->refine = [norm, scale](HParams* h) {
    h->norm_topk_prob = norm;
    h->routed_scale = static_cast<float>(scale);
    return absl::OkStatus();
  };
  return absl::OkStatus();
}

}  // namespace moe
