// GptOssForCausalLM config.json -> gpt-oss keys, with GptOssConfig's defaults (YaRN factor 32 over
// 4096 positions when the config names no RoPE scaling) and the keys llama.cpp's GptOssModel
// converter writes. layer_types must follow one period (a sliding layer where l % p < p - 1).
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status GptOssKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {131072, 1e-5, 150000.0}, &k));
  MOE_ASSIGN_OR_RETURN(int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(int64_t head_dim, SetHeadKeys(c, heads, &k));
  k.SetInt("rope.dimension_count", head_dim);
  MOE_ASSIGN_OR_RETURN(double partial, PartialRotaryFactor(j, 1.0));
  if (partial != 1.0) {
    return absl::UnimplementedError(
        "config.json partial_rotary_factor other than 1 is not "
        "supported for gpt-oss");
  }
  MOE_ASSIGN_OR_RETURN(double theta, RopeTheta(j, 150000.0));
  k.SetFloat("rope.freq_base", theta);
  static const nlohmann::json kDefaultYarn = {
      {"rope_type", "yarn"}, {"factor", 32.0},    {"beta_fast", 32.0},
      {"beta_slow", 1.0},    {"truncate", false}, {"original_max_position_embeddings", 4096}};
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, &kDefaultYarn, out));

  MOE_ASSIGN_OR_RETURN(bool bias, c.Bool("attention_bias", true));
  if (!bias) {
    return absl::UnimplementedError(
        "config.json attention_bias false is not supported for gpt-oss (its attention has "
        "biases)");
  }
  // The clamped SwiGLU's constants are the runtime's (llama.cpp's swiglu_oai).
  MOE_ASSIGN_OR_RETURN(double limit, c.Float("swiglu_limit", 7.0));
  MOE_ASSIGN_OR_RETURN(double alpha, c.Float("swiglu_alpha", 1.702));
  if (limit != 7.0 || alpha != 1.702) {
    return absl::UnimplementedError(absl::StrCat("config.json swiglu_limit ", limit,
                                                 " / swiglu_alpha ", alpha,
                                                 " are not supported (7 and 1.702)"));
  }
  MOE_ASSIGN_OR_RETURN(int64_t window, c.Int("sliding_window", 128));
  if (c.IsNull("sliding_window")) window = 0;
  int64_t period = 2;  // GptOssConfig's default layer_types: sliding, full, sliding, ...
  if (const nlohmann::json* types = c.Get("layer_types")) {
    MOE_ASSIGN_OR_RETURN(period, WindowedLayerPeriod(*types, layers, "sliding_attention"));
    if (period == 0) {
      return absl::UnimplementedError(
          "config.json layer_types has every layer sliding, which is not supported");
    }
  }
  k.SetInt("attention.sliding_window", window);
  k.SetInt("attention.sliding_window_pattern", period);

  int64_t experts = 0;
  MOE_ASSIGN_OR_RETURN(experts, c.Int("num_local_experts", 128));
  if (c.Get("num_local_experts") == nullptr) {  // attribute_map: num_experts
    MOE_ASSIGN_OR_RETURN(experts, c.Int("num_experts", 128));
  }
  MOE_ASSIGN_OR_RETURN(int64_t used, c.Int("num_experts_per_tok", 4));
  MOE_ASSIGN_OR_RETURN(int64_t ff, c.Int("intermediate_size", 2880));
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("feed_forward_length", ff);
  k.SetInt("expert_feed_forward_length", ff);
  return absl::OkStatus();
}

}  // namespace moe
