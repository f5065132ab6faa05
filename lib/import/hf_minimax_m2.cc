// MiniMaxM2ForCausalLM (MiniMax-M2, -M2.1) config.json -> minimax-m2 keys, with MiniMaxM2Config's
// defaults and the keys llama.cpp's MiniMaxM2Model converter writes (RoPE over rotary_dim of each
// head). transformers' model always routes by sigmoid with the e_score_correction_bias and
// always normalises the q and k projections as a whole; configs that say otherwise are refused.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status MinimaxM2Keys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {196608, 1e-6, 5000000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t head_dim, SetHeadKeys(c, 8, &k));
  MOE_ASSIGN_OR_RETURN(const double partial, PartialRotaryFactor(j, 1.0));
  MOE_ASSIGN_OR_RETURN(const int64_t rope_dim,
                       c.Int("rotary_dim", static_cast<int64_t>(head_dim * partial)));
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json rotary_dim ", rope_dim, " is not an even number of head_dim ", head_dim));
  }
  k.SetInt("rope.dimension_count", rope_dim);
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 5000000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  MOE_ASSIGN_OR_RETURN(const std::string scoring, c.String("scoring_func", "sigmoid"));
  MOE_ASSIGN_OR_RETURN(const bool qk_norm, c.Bool("use_qk_norm", true));
  MOE_ASSIGN_OR_RETURN(const std::string qk_norm_type, c.String("qk_norm_type", "per_layer"));
  if (scoring != "sigmoid" || !qk_norm || qk_norm_type != "per_layer") {
    return absl::UnimplementedError(absl::StrCat(
        "config.json scoring_func '", scoring, "', use_qk_norm ", qk_norm, ", qk_norm_type '",
        qk_norm_type, "': MiniMax-M2 runs sigmoid routing and a per_layer QK-norm"));
  }
  out->qk_norm = QkNorm::kFull;

  MOE_ASSIGN_OR_RETURN(int64_t experts, c.Int("num_local_experts", 256));
  if (c.Get("num_local_experts") == nullptr) {  // attribute_map: num_experts
    MOE_ASSIGN_OR_RETURN(experts, c.Int("num_experts", 256));
  }
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok", 8));
  MOE_ASSIGN_OR_RETURN(const int64_t ff, c.Int("intermediate_size", 1536));
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("feed_forward_length", ff);
  k.SetInt("expert_feed_forward_length", ff);
  k.SetInt("expert_gating_func", 2);
  MOE_ASSIGN_OR_RETURN(out->selection_bias, c.Bool("use_routing_bias", true));
  return absl::OkStatus();
}

}  // namespace moe
