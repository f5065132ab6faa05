// Glm4MoeForCausalLM (GLM-4.5 / 4.6) config.json -> glm4moe keys, with Glm4MoeConfig's defaults and
// the keys llama.cpp's Glm4MoeModel converter writes. The multi-token-prediction layers the
// checkpoint carries after num_hidden_layers count in block_count, as in the GGUF, and are not run.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status Glm4MoeKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {131072, 1e-5, 10000.0}, &k));
  MOE_ASSIGN_OR_RETURN(int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(int64_t nextn, c.Int("num_nextn_predict_layers", 0));
  k.SetInt("block_count", layers + nextn);
  k.SetInt("nextn_predict_layers", nextn);
  MOE_ASSIGN_OR_RETURN(int64_t head_dim, SetHeadKeys(c, 8, &k));
  MOE_ASSIGN_OR_RETURN(double partial, PartialRotaryFactor(j, 0.5));
  const int64_t rope_dim = static_cast<int64_t>(head_dim * partial);  // transformers' int()
  if (!(partial > 0 && partial <= 1) || rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json partial_rotary_factor ", partial,
                                                   " of head_dim ", head_dim,
                                                   " is not an even number of dimensions"));
  }
  k.SetInt("rope.dimension_count", rope_dim);
  MOE_ASSIGN_OR_RETURN(double theta, RopeTheta(j, 10000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));

  // Glm4MoeAttention: q/k/v carry attention_bias, o_proj never does. The glm4moe rules (as
  // llama.cpp's) always expect the q/k/v biases.
  MOE_ASSIGN_OR_RETURN(bool bias, c.Bool("attention_bias", false));
  if (!bias) {
    return absl::UnimplementedError(
        "config.json attention_bias false is not supported for Glm4MoeForCausalLM (glm4moe "
        "always has q/k/v biases)");
  }
  MOE_ASSIGN_OR_RETURN(bool qk_norm, c.Bool("use_qk_norm", false));
  out->qk_norm = qk_norm ? QkNorm::kPerHead : QkNorm::kNone;

  MOE_ASSIGN_OR_RETURN(int64_t experts, c.Int("n_routed_experts", 128));
  MOE_ASSIGN_OR_RETURN(int64_t used, c.Int("num_experts_per_tok", 8));
  MOE_ASSIGN_OR_RETURN(int64_t ff, c.Int("intermediate_size", 10944));
  MOE_ASSIGN_OR_RETURN(int64_t moe_ff, c.Int("moe_intermediate_size", 1408));
  MOE_ASSIGN_OR_RETURN(int64_t shared, c.Int("n_shared_experts", 1));
  MOE_ASSIGN_OR_RETURN(int64_t dense, c.Int("first_k_dense_replace", 1));
  MOE_ASSIGN_OR_RETURN(bool norm, c.Bool("norm_topk_prob", true));
  MOE_ASSIGN_OR_RETURN(double scale, c.Float("routed_scaling_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(int64_t groups, c.Int("n_group", 1));
  MOE_ASSIGN_OR_RETURN(int64_t groups_used, c.Int("topk_group", 1));
  // Glm4MoeTopkRouter: sigmoid + e_score_correction_bias.
  SetMixtureKeys({experts, used, ff, moe_ff, shared, dense, norm, scale, groups, groups_used, 2},
                 &k);
  out->selection_bias = true;
  return absl::OkStatus();
}

}  // namespace moe
