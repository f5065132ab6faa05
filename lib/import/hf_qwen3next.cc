// Qwen3NextForCausalLM (Qwen3-Next-80B-A3B) and Qwen3.5's MoE models (Qwen3_5MoeForCausalLM, and
// the language model of Qwen3_5MoeForConditionalGeneration: Qwen3.5-35B-A3B, -122B-A10B,
// -397B-A17B) config.json -> qwen3next / qwen35moe keys, with Qwen3NextConfig's and
// Qwen3_5MoeTextConfig's defaults, as llama.cpp's converters write them: the gated delta nets'
// linear_* sizes as the ssm.* keys (state: the key head size; groups: the key heads; the time
// step rank: the value heads), RoPE over partial_rotary_factor of each head, Qwen3.5's
// multimodal sections (which for text rotate as plain RoPE). layer_types, where the config has
// it, names each layer (transformers reads it before full_attention_interval). What the runtime
// does not run is refused by name: attention biases, an attention without its
// output gate, dense MLP layers, key and value heads of different sizes.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {
namespace {

struct QwenHybridDefaults {
  int64_t experts, used;
};

absl::Status QwenDeltaNetHybridKeys(const nlohmann::json& j, const char* family,
                                    QwenHybridDefaults d, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {32768, 1e-6, 10000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(const int64_t kv_heads, c.Int("num_key_value_heads", 2));
  MOE_ASSIGN_OR_RETURN(const int64_t head_dim, c.Int("head_dim", 256));
  k.SetInt("attention.head_count_kv", kv_heads);
  k.SetInt("attention.key_length", head_dim);
  k.SetInt("attention.value_length", head_dim);
  MOE_ASSIGN_OR_RETURN(const bool bias, c.Bool("attention_bias", false));
  if (bias) {
    return absl::UnimplementedError(
        absl::StrCat("config.json attention_bias true is not supported for ", family));
  }
  MOE_ASSIGN_OR_RETURN(const bool gated, c.Bool("attn_output_gate", true));
  if (!gated) {
    return absl::UnimplementedError(
        absl::StrCat("config.json attn_output_gate false is not supported for ", family,
                     " (its attention layers multiply their output by a gate q_proj yields)"));
  }
  MOE_RETURN_IF_ERROR(RefuseDenseMlpLayers(c, family));

  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 10000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_ASSIGN_OR_RETURN(const double partial, PartialRotaryFactor(j, 0.25));
  k.SetInt("rope.dimension_count", static_cast<int64_t>(head_dim * partial));
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));

  MOE_ASSIGN_OR_RETURN(const int64_t conv, c.Int("linear_conv_kernel_dim", 4));
  MOE_ASSIGN_OR_RETURN(const int64_t key_size, c.Int("linear_key_head_dim", 128));
  MOE_ASSIGN_OR_RETURN(const int64_t value_size, c.Int("linear_value_head_dim", 128));
  MOE_ASSIGN_OR_RETURN(const int64_t key_heads, c.Int("linear_num_key_heads", 16));
  MOE_ASSIGN_OR_RETURN(const int64_t value_heads, c.Int("linear_num_value_heads", 32));
  if (key_size != value_size) {
    return absl::UnimplementedError(
        absl::StrCat("config.json linear_key_head_dim ", key_size, " and linear_value_head_dim ",
                     value_size, " differ; the gated delta net runs square head states only"));
  }
  SetMamba2Keys({conv, value_heads * value_size, key_size, value_heads, key_heads}, &k);

  if (const nlohmann::json* types = c.Get("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json layer_types must list the ", layers, " layers' kinds"));
    }
    std::vector<int64_t> recurrent;
    for (const nlohmann::json& t : *types) {
      if (t != "linear_attention" && t != "full_attention") {
        return absl::UnimplementedError(absl::StrCat("config.json layer_types holds ", t.dump(),
                                                     " (linear_attention, full_attention)"));
      }
      recurrent.push_back(t == "linear_attention");
    }
    k.SetIntArray("attention.recurrent_layers", std::move(recurrent));
  } else {
    MOE_ASSIGN_OR_RETURN(const int64_t interval, c.Int("full_attention_interval", 4));
    k.SetInt("full_attention_interval", interval);
  }

  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("num_experts", d.experts));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok", d.used));
  MOE_ASSIGN_OR_RETURN(const int64_t moe_ff, c.Int("moe_intermediate_size", 512));
  MOE_ASSIGN_OR_RETURN(const int64_t shared, c.Int("shared_expert_intermediate_size", 512));
  MOE_ASSIGN_OR_RETURN(const bool norm, c.Bool("norm_topk_prob", true));
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("expert_feed_forward_length", moe_ff);
  k.SetInt("expert_shared_feed_forward_length", shared);
  k.SetBool("expert_weights_norm", norm);
  out->qk_norm = QkNorm::kPerHead;  // what a GGUF file states by its attn_q_norm tensors
  return absl::OkStatus();
}

}  // namespace

absl::Status Qwen3NextKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  return QwenDeltaNetHybridKeys(j, "Qwen3-Next", {512, 10}, out);
}

absl::Status Qwen35MoeKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  MOE_RETURN_IF_ERROR(QwenDeltaNetHybridKeys(j, "Qwen3.5-MoE", {256, 8}, out));
  MOE_ASSIGN_OR_RETURN(std::vector<int64_t> sections, MropeSections(j, {11, 11, 10}));
  out->keys.SetIntArray("rope.dimension_sections", std::move(sections));
  return absl::OkStatus();
}

}  // namespace moe
