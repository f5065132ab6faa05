// Dots1ForCausalLM (dots.llm1.base / .inst) config.json -> dots1 keys, with Dots1Config's
// defaults: DeepSeek-V3's routing (sigmoid with the e_score_correction_bias, groups, weight
// normalisation and scale) as llama.cpp's Dots1Model converter writes it. Sliding-window layers,
// which Dots1Config can name but the released models do not use, are refused.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status Dots1Keys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {2048, 1e-6, 10000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  MOE_RETURN_IF_ERROR(SetHeadKeys(c, heads, &k).status());
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 10000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  MOE_ASSIGN_OR_RETURN(const bool bias, c.Bool("attention_bias", false));
  if (bias) {
    return absl::UnimplementedError("config.json attention_bias true is not supported for dots1");
  }
  // Dots1Config's layer_types: sliding from max_window_layers on when sliding_window is set.
  MOE_ASSIGN_OR_RETURN(const int64_t window_from, c.Int("max_window_layers", layers));
  bool slides = !c.IsNull("sliding_window") && window_from < layers;
  if (const nlohmann::json* types = c.Get("layer_types")) {
    slides = types->is_array() &&
             std::any_of(types->begin(), types->end(),
                         [](const nlohmann::json& t) { return t != "full_attention"; });
  }
  if (slides) {
    return absl::UnimplementedError(
        "config.json names sliding-window layers (layer_types / max_window_layers), which dots1 "
        "does not support");
  }
  MOE_ASSIGN_OR_RETURN(int64_t experts, c.Int("n_routed_experts"));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok"));
  MOE_ASSIGN_OR_RETURN(const int64_t ff, c.Int("intermediate_size", 10944));
  MOE_ASSIGN_OR_RETURN(const int64_t moe_ff, c.Int("moe_intermediate_size", 1408));
  MOE_ASSIGN_OR_RETURN(const int64_t shared, c.Int("n_shared_experts", 0));
  MOE_ASSIGN_OR_RETURN(const int64_t dense, c.Int("first_k_dense_replace", 0));
  MOE_ASSIGN_OR_RETURN(const bool norm, c.Bool("norm_topk_prob", false));
  MOE_ASSIGN_OR_RETURN(const double scale, c.Float("routed_scaling_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(const int64_t groups, c.Int("n_group", 1));
  MOE_ASSIGN_OR_RETURN(const int64_t groups_used, c.Int("topk_group", 1));
  SetMixtureKeys({experts, used, ff, moe_ff, shared, dense, norm, scale, groups, groups_used, 2},
                 &k);
  out->selection_bias = true;  // DeepseekV3TopkRouter's e_score_correction_bias
  out->qk_norm = QkNorm::kPerHead;
  return absl::OkStatus();
}

}  // namespace moe
