// BailingMoeV2ForCausalLM (Ling-mini-2.0, Ling-flash-2.0, Ring-2.0; its modeling code ships with
// the checkpoints, not in transformers) config.json -> bailingmoe2 keys, as llama.cpp's
// BailingMoeV2Model converter writes them: the RoPE over partial_rotary_factor of each head
// (0.5 when absent, the converter's default), leading dense layers, groups, the scaled sigmoid
// routing. Where the checkpoints' modeling code and the converter could read a config apart, the
// config is refused instead of guessed: renormalisation switched off (the modeling code
// renormalises whenever it picks more than one expert), several shared experts with an explicit
// width.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status BailingMoeV2Keys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {32768, 1e-6, 600000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(const int64_t nextn, c.Int("num_nextn_predict_layers", 0));
  k.SetInt("block_count", layers + nextn);
  k.SetInt("nextn_predict_layers", nextn);
  MOE_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(const int64_t head_dim, SetHeadKeys(c, heads, &k));
  MOE_ASSIGN_OR_RETURN(const double partial, PartialRotaryFactor(j, 0.5));
  const int64_t rope_dim = static_cast<int64_t>(head_dim * partial);  // the converter's int()
  if (!(partial > 0 && partial <= 1) || rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json partial_rotary_factor ", partial,
                                                   " of head_dim ", head_dim,
                                                   " is not an even number of dimensions"));
  }
  MOE_ASSIGN_OR_RETURN(const int64_t rotary_dim, c.Int("rotary_dim", rope_dim));
  if (rotary_dim != rope_dim) {
    return absl::UnimplementedError(absl::StrCat("config.json rotary_dim ", rotary_dim,
                                                 " disagrees with partial_rotary_factor (",
                                                 rope_dim, " of ", head_dim, ")"));
  }
  k.SetInt("rope.dimension_count", rope_dim);
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 600000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  for (const char* bias : {"use_qkv_bias", "use_bias"}) {
    MOE_ASSIGN_OR_RETURN(const bool on, c.Bool(bias, false));
    if (on) {
      return absl::UnimplementedError(
          absl::StrCat("config.json ", bias, " true is not supported for bailingmoe2"));
    }
  }
  MOE_ASSIGN_OR_RETURN(const bool qk_norm, c.Bool("use_qk_norm", true));
  out->qk_norm = qk_norm ? QkNorm::kPerHead : QkNorm::kNone;

  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("num_experts"));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok"));
  MOE_ASSIGN_OR_RETURN(const int64_t moe_ff, c.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(const int64_t dense_ff, c.Int("intermediate_size"));
  MOE_ASSIGN_OR_RETURN(const int64_t dense, c.Int("first_k_dense_replace", 0));
  MOE_ASSIGN_OR_RETURN(const int64_t shared, c.Int("num_shared_experts", 0));
  MOE_ASSIGN_OR_RETURN(const int64_t shared_width,
                       c.Int("moe_shared_expert_intermediate_size", moe_ff));
  if (shared > 1 && c.Get("moe_shared_expert_intermediate_size") != nullptr) {
    return absl::UnimplementedError(
        "config.json num_shared_experts above 1 with moe_shared_expert_intermediate_size: the "
        "shared experts' width is read differently by the modeling code and llama.cpp");
  }
  MOE_ASSIGN_OR_RETURN(const std::string score, c.String("score_function", "sigmoid"));
  if (score != "sigmoid" && score != "softmax") {
    return absl::UnimplementedError(absl::StrCat("config.json score_function '", score,
                                                 "' is not supported (sigmoid, softmax)"));
  }
  MOE_ASSIGN_OR_RETURN(const bool norm, c.Bool("norm_topk_prob", true));
  if (!norm && used > 1) {
    return absl::UnimplementedError(
        "config.json norm_topk_prob false: the modeling code renormalises the chosen experts' "
        "weights regardless, llama.cpp's converter would not");
  }
  MOE_ASSIGN_OR_RETURN(const double scale, c.Float("routed_scaling_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(const int64_t groups, c.Int("n_group", 1));
  MOE_ASSIGN_OR_RETURN(const int64_t groups_used, c.Int("topk_group", groups));
  SetMixtureKeys({experts, used, dense_ff, moe_ff, shared, dense, norm, scale, groups, groups_used,
                  score == "sigmoid" ? 2 : 1},
                 &k);
  k.SetInt("expert_shared_feed_forward_length", shared_width);
  MOE_ASSIGN_OR_RETURN(out->selection_bias, c.Bool("moe_router_enable_expert_bias", true));
  return absl::OkStatus();
}

}  // namespace moe
