// GraniteMoeHybridForCausalLM (granite-4.0-h-tiny, -h-small) config.json -> granitehybrid keys,
// with GraniteMoeHybridConfig's defaults and the keys llama.cpp's GraniteHybridModel converter
// writes: layer_types names each layer ("attention" attends, "mamba" is a Mamba-2 layer:
// head_count_kv 0), the mamba_* sizes as the ssm.* keys, Granite's multipliers, the shared MLP's
// width. Position encoding as transformers reads position_embedding_type (none unless "rope"; the
// released configs say "nope", as llama.cpp's converter assumes). Biases on the Mamba-2
// projections (mamba_proj_bias) and convolutions without one (mamba_conv_bias false), which
// llama.cpp does not run, are refused, as are attention biases.
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status GraniteMoeHybridKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {2048, 1e-6, 10000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t d, c.Int("hidden_size"));
  MOE_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(const int64_t kv_heads, c.Int("num_key_value_heads", heads));
  MOE_RETURN_IF_ERROR(SetLayerKindKeys(c, layers, kv_heads, "attention", "mamba", &k));
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 10000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_ASSIGN_OR_RETURN(const std::string position, c.String("position_embedding_type", "nope"));
  k.SetBool("rope.scaling.finetuned", position == "rope");
  MOE_RETURN_IF_ERROR(ReadRopeScaling(j, YarnTemperature::kCosSin, nullptr, out));
  for (const char* refused : {"attention_bias", "mamba_proj_bias"}) {
    MOE_ASSIGN_OR_RETURN(const bool on, c.Bool(refused, false));
    if (on) {
      return absl::UnimplementedError(absl::StrCat(
          "config.json ", refused, " true is not supported for GraniteMoeHybridForCausalLM"));
    }
  }
  MOE_ASSIGN_OR_RETURN(const bool conv_bias, c.Bool("mamba_conv_bias", true));
  if (!conv_bias) {
    return absl::UnimplementedError(
        "config.json mamba_conv_bias false (Mamba-2 convolutions without a bias) is not "
        "supported");
  }
  MOE_ASSIGN_OR_RETURN(const int64_t expand, c.Int("mamba_expand", 2));
  MOE_ASSIGN_OR_RETURN(const int64_t ssm_heads, c.Int("mamba_n_heads", 128));
  const int64_t inner = expand * d;
  int64_t head_dim = 0;
  if (const nlohmann::json* hd = c.Get("mamba_d_head"); hd != nullptr && !hd->is_string()) {
    MOE_ASSIGN_OR_RETURN(head_dim, c.Int("mamba_d_head"));
  } else if (ssm_heads > 0) {
    head_dim = inner / ssm_heads;  // "auto"
  }
  if (ssm_heads <= 0 || head_dim * ssm_heads != inner) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json mamba_n_heads ", ssm_heads, " x mamba_d_head ", head_dim,
                     " must be mamba_expand x hidden_size = ", inner));
  }
  MOE_ASSIGN_OR_RETURN(const int64_t conv, c.Int("mamba_d_conv", 4));
  MOE_ASSIGN_OR_RETURN(const int64_t state, c.Int("mamba_d_state", 256));
  MOE_ASSIGN_OR_RETURN(const int64_t groups, c.Int("mamba_n_groups", 1));
  SetMamba2Keys({conv, inner, state, ssm_heads, groups}, &k);
  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("num_local_experts", 8));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok", 2));
  MOE_ASSIGN_OR_RETURN(const int64_t ff, c.Int("intermediate_size", 11008));
  MOE_ASSIGN_OR_RETURN(const int64_t shared, c.Int("shared_intermediate_size", 1024));
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("feed_forward_length", ff);
  k.SetInt("expert_feed_forward_length", ff);
  k.SetInt("expert_shared_feed_forward_length", shared);
  out->refine = RotateHalfRope;  // where RoPE is on (Bamba-style configs)
  return SetGraniteMultiplierKeys(c, &k);
}

}  // namespace moe
