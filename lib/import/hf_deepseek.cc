// DeepseekForCausalLM (deepseek-moe-16b-base / -chat, whose modeling code ships with the
// checkpoints) config.json -> deepseek keys, with DeepseekConfig's defaults and the keys
// llama.cpp's DeepseekModel converter writes. Its q/k rows are permuted by that converter for
// consecutive-pair RoPE; here they are read as stored, with transformers-style rotate_half
// (RotateHalfRope). norm_topk_prob, which llama.cpp's graph fixes at false (the published configs'
// value), is taken as the modeling code reads it; softmax scoring with greedy top-k is the only
// routing it has.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status DeepseekMoeKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {2048, 1e-6, 10000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(const int64_t kv_heads, c.Int("num_key_value_heads", heads));
  k.SetInt("attention.head_count_kv", kv_heads);
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 10000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  MOE_ASSIGN_OR_RETURN(const bool bias, c.Bool("attention_bias", false));
  if (bias) {
    return absl::UnimplementedError(
        "config.json attention_bias true is not supported for DeepseekForCausalLM");
  }
  MOE_ASSIGN_OR_RETURN(const std::string scoring, c.String("scoring_func", "softmax"));
  if (scoring != "softmax") {
    return absl::UnimplementedError(absl::StrCat("config.json scoring_func '", scoring,
                                                 "' is not supported for DeepSeek-MoE (softmax)"));
  }
  MOE_ASSIGN_OR_RETURN(const int64_t freq, c.Int("moe_layer_freq", 1));
  if (freq != 1) {
    return absl::UnimplementedError(
        absl::StrCat("config.json moe_layer_freq ", freq,
                     ": dense layers between MoE layers are not supported"));
  }
  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("n_routed_experts"));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok"));
  MOE_ASSIGN_OR_RETURN(const int64_t ff, c.Int("intermediate_size", 11008));
  MOE_ASSIGN_OR_RETURN(const int64_t moe_ff, c.Int("moe_intermediate_size", 1407));
  int64_t shared = 0;  // null: none
  if (!c.IsNull("n_shared_experts")) {
    MOE_ASSIGN_OR_RETURN(shared, c.Int("n_shared_experts", 0));
  }
  MOE_ASSIGN_OR_RETURN(const int64_t dense, c.Int("first_k_dense_replace", 0));
  MOE_ASSIGN_OR_RETURN(const bool norm, c.Bool("norm_topk_prob", false));
  SetMixtureKeys({experts, used, ff, moe_ff, shared, dense, norm, 1.0, 1, 1, 1}, &k);
  out->refine = [norm](HParams* h) {
    h->norm_topk_prob = norm;
    return RotateHalfRope(h);
  };
  return absl::OkStatus();
}

}  // namespace moe
