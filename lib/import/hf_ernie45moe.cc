// Ernie4_5_MoeForCausalLM (ERNIE-4.5-21B-A3B-PT, -300B-A47B-PT) config.json -> ernie4_5-moe keys,
// with Ernie4_5_MoeConfig's defaults. Where llama.cpp's converter and transformers read the
// config differently, transformers' reading is taken (it defines the model): the shared experts'
// width is moe_intermediate_size x moe_num_shared_experts (the converter writes
// intermediate_size / num_key_value_heads, the same number for every published ERNIE), and
// moe_layer_end_index is honoured (refused when it leaves trailing layers dense, which the
// runtime's rule cannot say; the published models end at the last layer). The
// multi-token-prediction weights (mtp_*) the checkpoints carry are not read.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status Ernie45MoeKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {131072, 1e-5, 500000.0}, &k));
  MOE_ASSIGN_OR_RETURN(int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  MOE_RETURN_IF_ERROR(SetHeadKeys(c, heads, &k).status());
  MOE_ASSIGN_OR_RETURN(double theta, RopeTheta(j, 500000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));

  // use_bias puts biases on every projection, the MLPs' and the head's included.
  MOE_ASSIGN_OR_RETURN(bool bias, c.Bool("use_bias", false));
  if (bias) {
    return absl::UnimplementedError(
        "config.json use_bias true (biases on every projection, MLPs and head included) is not "
        "supported for Ernie4_5_MoeForCausalLM");
  }
  MOE_ASSIGN_OR_RETURN(std::string gate_act, c.String("moe_gate_act", "softmax"));
  if (gate_act != "softmax") {
    return absl::UnimplementedError(
        absl::StrCat("config.json moe_gate_act '", gate_act, "' is not supported (softmax)"));
  }
  MOE_ASSIGN_OR_RETURN(int64_t experts, c.Int("moe_num_experts", 64));
  MOE_ASSIGN_OR_RETURN(int64_t used, c.Int("moe_k", 6));
  MOE_ASSIGN_OR_RETURN(int64_t ff, c.Int("intermediate_size", 12288));
  MOE_ASSIGN_OR_RETURN(int64_t moe_ff, c.Int("moe_intermediate_size", 1536));
  MOE_ASSIGN_OR_RETURN(int64_t shared, c.Int("moe_num_shared_experts", 2));
  MOE_ASSIGN_OR_RETURN(int64_t start, c.Int("moe_layer_start_index", 1));
  MOE_ASSIGN_OR_RETURN(int64_t end, c.Int("moe_layer_end_index", -1));
  MOE_ASSIGN_OR_RETURN(int64_t interval, c.Int("moe_layer_interval", 1));
  if (end < 0) end = layers - 1;  // Ernie4_5_MoeConfig's "the last layer"
  if (end < layers - 1) {
    return absl::UnimplementedError(absl::StrCat("config.json moe_layer_end_index ", end,
                                                 " leaves layers after it dense (of ", layers,
                                                 " layers): not supported"));
  }
  if (interval < 1 || start < 0 || experts <= 0 || shared < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json moe_layer_interval ", interval, ", moe_layer_start_index ", start,
                     ", moe_num_experts ", experts, ", moe_num_shared_experts ", shared));
  }
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("feed_forward_length", ff);
  k.SetInt("expert_feed_forward_length", moe_ff);
  k.SetInt("leading_dense_block_count", start);
  k.SetInt("interleave_moe_layer_step", interval);
  k.SetInt("expert_shared_feed_forward_length", moe_ff * shared);
  out->selection_bias = true;  // moe_statics.e_score_correction_bias
  out->tied_output_default = true;
  return absl::OkStatus();
}

}  // namespace moe
