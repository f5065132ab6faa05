// DeepseekV2ForCausalLM / DeepseekV3ForCausalLM config.json -> deepseek2 keys, with the defaults of
// DeepseekV2Config / DeepseekV3Config and the keys llama.cpp's DeepseekV2Model converter writes:
// one latent "KV head" of kv_lora_rank + qk_rope_head_dim, the per-head sizes as *_mla, YaRN's
// temperature as yarn_log_multiplier = 0.1 mscale_all_dim. Semantics are DeepSeek's own modeling
// code (which the checkpoints were trained with and llama.cpp follows); where transformers' port
// departs from it (V2's attention scale without mscale^2, its ignored norm_topk_prob), the
// original is followed or the variant refused.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {
namespace {

struct Defaults {
  int64_t max_pos, q_lora, experts, used, ff, moe_ff, shared, dense, groups, groups_used;
  double scale;
  bool norm;
};

absl::Status DeepseekKeys(const nlohmann::json& j, bool v3, HfFamilyConfig* out) {
  const ConfigJson c(j);
  // DeepseekV3Config / DeepseekV2Config (num_experts_per_tok has no V2 default: None is dense).
  const Defaults d = v3 ? Defaults{4096, 1536, 256, 8, 18432, 2048, 1, 3, 8, 4, 2.5, true}
                        : Defaults{2048, 1536, 64, -1, 11008, 1407, 2, 0, 1, 1, 1.0, false};
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {d.max_pos, 1e-6, 10000.0}, &k));

  // Multi-head latent attention.
  MOE_ASSIGN_OR_RETURN(int64_t kv_lora, c.Int("kv_lora_rank", 512));
  MOE_ASSIGN_OR_RETURN(int64_t nope, c.Int("qk_nope_head_dim", 128));
  MOE_ASSIGN_OR_RETURN(int64_t rope, c.Int("qk_rope_head_dim", 64));
  MOE_ASSIGN_OR_RETURN(int64_t v_head, c.Int("v_head_dim", 128));
  // q_lora_rank null (V2-Lite) is q straight from q_proj; absent is the class default.
  int64_t q_lora = 0;
  if (!c.IsNull("q_lora_rank")) {
    MOE_ASSIGN_OR_RETURN(q_lora, c.Int("q_lora_rank", d.q_lora));
  }
  k.SetInt("attention.q_lora_rank", q_lora);
  k.SetInt("attention.kv_lora_rank", kv_lora);
  k.SetInt("attention.head_count_kv", 1);
  k.SetInt("attention.key_length", kv_lora + rope);
  k.SetInt("attention.value_length", kv_lora);
  k.SetInt("attention.key_length_mla", nope + rope);
  k.SetInt("attention.value_length_mla", v_head);
  k.SetInt("rope.dimension_count", rope);
  MOE_ASSIGN_OR_RETURN(double theta, RopeTheta(j, 10000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kDeepseek, nullptr, out));
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    MOE_ASSIGN_OR_RETURN(bool bias, c.Bool(key, false));
    if (bias) {
      return absl::UnimplementedError(
          absl::StrCat("config.json ", key, " true is not supported for DeepSeek"));
    }
  }
  // The checkpoints' q_pe/k_pe rows are in rotation pairs (2i, 2i+1): DeepSeek's own code and
  // transformers (V2's complex rotation, V3's rope_interleave) rotate them as such, which is the
  // runtime's consecutive-pair RoPE on the weights as stored. rope_interleave false would rotate
  // (i, i + d/2) instead.
  MOE_ASSIGN_OR_RETURN(bool interleave, c.Bool("rope_interleave", true));
  if (!interleave) {
    return absl::UnimplementedError(
        "config.json rope_interleave false is not supported (DeepSeek's RoPE rotates "
        "consecutive pairs)");
  }

  // Experts and routing.
  MOE_ASSIGN_OR_RETURN(int64_t experts, c.Int("n_routed_experts", d.experts));
  MOE_ASSIGN_OR_RETURN(int64_t used, c.Int("num_experts_per_tok",
                                           d.used < 0 ? std::nullopt : std::optional(d.used)));
  MOE_ASSIGN_OR_RETURN(int64_t ff, c.Int("intermediate_size", d.ff));
  MOE_ASSIGN_OR_RETURN(int64_t moe_ff, c.Int("moe_intermediate_size", d.moe_ff));
  int64_t shared = 0;  // null: no shared experts
  if (!c.IsNull("n_shared_experts")) {
    MOE_ASSIGN_OR_RETURN(shared, c.Int("n_shared_experts", d.shared));
  }
  MOE_ASSIGN_OR_RETURN(int64_t dense, c.Int("first_k_dense_replace", d.dense));
  MOE_ASSIGN_OR_RETURN(int64_t freq, c.Int("moe_layer_freq", 1));
  if (freq != 1) {
    return absl::UnimplementedError(
        absl::StrCat("config.json moe_layer_freq ", freq,
                     ": dense layers between MoE layers are not supported"));
  }
  MOE_ASSIGN_OR_RETURN(double scale, c.Float("routed_scaling_factor", d.scale));
  MOE_ASSIGN_OR_RETURN(bool norm, c.Bool("norm_topk_prob", d.norm));
  MOE_ASSIGN_OR_RETURN(std::string scoring, c.String("scoring_func", v3 ? "sigmoid" : "softmax"));
  MOE_ASSIGN_OR_RETURN(std::string topk, c.String("topk_method", v3 ? "noaux_tc" : "greedy"));
  int64_t groups = 1, groups_used = 1;
  if (v3) {
    if (scoring != "sigmoid") {
      return absl::UnimplementedError(absl::StrCat("config.json scoring_func '", scoring,
                                                   "' is not supported for DeepSeek-V3 (sigmoid)"));
    }
    if (topk != "noaux_tc") {
      return absl::UnimplementedError(absl::StrCat(
          "config.json topk_method '", topk, "' is not supported for DeepSeek-V3 (noaux_tc)"));
    }
    // noaux_tc: groups scored by the sum of their best two biased scores, as the runtime does.
    MOE_ASSIGN_OR_RETURN(groups, c.Int("n_group", d.groups));
    MOE_ASSIGN_OR_RETURN(groups_used, c.Int("topk_group", d.groups_used));
    out->selection_bias = true;  // e_score_correction_bias
  } else {
    if (scoring != "softmax") {
      return absl::UnimplementedError(absl::StrCat("config.json scoring_func '", scoring,
                                                   "' is not supported for DeepSeek-V2 (softmax)"));
    }
    if (topk == "group_limited_greedy") {
      MOE_ASSIGN_OR_RETURN(int64_t n_group, c.Int("n_group", 1));
      if (n_group > 1) {
        return absl::UnimplementedError(absl::StrCat(
            "config.json topk_method 'group_limited_greedy' with n_group ", n_group,
            " is not supported (it scores a group by its best expert; the runtime by its best "
            "two)"));
      }
    } else if (topk != "greedy") {
      return absl::UnimplementedError(
          absl::StrCat("config.json topk_method '", topk,
                       "' is not supported for DeepSeek-V2 (greedy, group_limited_greedy)"));
    }
    // DeepSeek's V2 code renormalises and skips routed_scaling_factor when norm_topk_prob is
    // set; transformers' port ignores norm_topk_prob. The two disagree, so neither is guessed.
    if (norm) {
      return absl::UnimplementedError(
          "config.json norm_topk_prob true is not supported for DeepSeek-V2 (DeepSeek's code and "
          "transformers weight the experts differently then)");
    }
  }
  SetMixtureKeys(
      {experts, used, ff, moe_ff, shared, dense, norm, scale, groups, groups_used, v3 ? 2 : 1}, &k);
  return absl::OkStatus();
}

}  // namespace

absl::Status DeepseekV2Keys(const nlohmann::json& j, HfFamilyConfig* out) {
  return DeepseekKeys(j, /*v3=*/false, out);
}

absl::Status DeepseekV3Keys(const nlohmann::json& j, HfFamilyConfig* out) {
  return DeepseekKeys(j, /*v3=*/true, out);
}

}  // namespace moe
