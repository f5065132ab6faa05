// Qwen3VLMoeForConditionalGeneration (Qwen3-VL-30B-A3B, -235B-A22B) config.json -> qwen3vlmoe
// keys for its language model (text_config, with Qwen3VLMoeTextConfig's defaults), as llama.cpp's
// Qwen3VLMoeTextModel converter writes them: Qwen3-MoE's keys and the multimodal RoPE's sections
// (rope_scaling.mrope_section; for text every position component is the token's position). The
// routed weights are always renormalised, as transformers' Qwen3VLMoeTextSparseMoeBlock does;
// what the runtime does not run is refused by name (attention biases, dense MLP layers).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status Qwen3VlMoeKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {128000, 1e-6, 5000000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(const int64_t head_dim, SetHeadKeys(c, heads, &k));
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 5000000.0));
  k.SetFloat("rope.freq_base", theta);
  k.SetInt("rope.dimension_count", head_dim);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  MOE_ASSIGN_OR_RETURN(std::vector<int64_t> sections, MropeSections(j, {24, 20, 20}));
  k.SetIntArray("rope.dimension_sections", std::move(sections));
  MOE_ASSIGN_OR_RETURN(const bool bias, c.Bool("attention_bias", false));
  if (bias) {
    return absl::UnimplementedError(
        "config.json attention_bias true is not supported for Qwen3-VL-MoE");
  }
  MOE_RETURN_IF_ERROR(RefuseDenseMlpLayers(c, "Qwen3-VL-MoE"));
  MOE_ASSIGN_OR_RETURN(const bool norm, c.Bool("norm_topk_prob", true));
  if (!norm) {
    return absl::UnimplementedError(
        "config.json norm_topk_prob false: Qwen3-VL-MoE's experts block renormalises the routed "
        "weights whatever it says");
  }
  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("num_experts", 60));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok", 4));
  MOE_ASSIGN_OR_RETURN(const int64_t moe_ff, c.Int("moe_intermediate_size", 1408));
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("expert_feed_forward_length", moe_ff);
  k.SetBool("expert_weights_norm", true);
  out->qk_norm = QkNorm::kPerHead;  // what a GGUF file states by its attn_q_norm tensors
  return absl::OkStatus();
}

}  // namespace moe
