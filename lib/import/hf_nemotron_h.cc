// NemotronHForCausalLM with experts (Nemotron-3-Nano-30B-A3B, Nemotron 3 Super) config.json ->
// nemotron_h_moe keys, as llama.cpp's NemotronHModel converter writes them: hybrid_override_pattern
// spells each layer's one part (M a Mamba-2 mixer: head_count_kv and feed_forward_length 0; *
// attention: head_count_kv only; E experts: feed_forward_length moe_intermediate_size), the mamba_*
// sizes as the ssm.* keys (inner size mamba_num_heads x mamba_head_dim), the routed and shared
// experts' widths. Routing as transformers' NemotronHTopkRouter reads it: sigmoid with
// e_score_correction_bias, n_group / topk_group, norm_topk_prob, routed_scaling_factor; Nemotron 3
// Super's moe_latent_size. A config without experts (the dense Nemotron-H), an activation other
// than relu2, or biases llama.cpp does not run is refused by name.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {

absl::Status NemotronHKeys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  if (c.Get("num_experts_per_tok") == nullptr) {
    return absl::UnimplementedError(
        "a Nemotron-H config without experts (num_experts_per_tok) is a dense model: libmoe "
        "runs Mixture-of-Experts models only");
  }
  MOE_ASSIGN_OR_RETURN(const std::string act, c.String("mlp_hidden_act", "relu2"));
  if (act != "relu2") {
    return absl::UnimplementedError(
        absl::StrCat("config.json mlp_hidden_act '", act, "' is not supported (only relu2)"));
  }
  for (const char* refused : {"attention_bias", "mlp_bias", "use_bias"}) {
    MOE_ASSIGN_OR_RETURN(const bool on, c.Bool(refused, false));
    if (on) {
      return absl::UnimplementedError(
          absl::StrCat("config.json ", refused, " true is not supported for NemotronH"));
    }
  }
  MOE_ASSIGN_OR_RETURN(const bool conv_bias, c.Bool("use_conv_bias", true));
  if (!conv_bias) {
    return absl::UnimplementedError(
        "config.json use_conv_bias false (Mamba-2 convolutions without a bias) is not supported");
  }
  MOE_ASSIGN_OR_RETURN(const int64_t d, c.Int("hidden_size"));
  MOE_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  if (heads <= 0) return absl::InvalidArgumentError("config.json num_attention_heads is 0");
  MOE_ASSIGN_OR_RETURN(const int64_t kv_heads, c.Int("num_key_value_heads", heads));
  MOE_ASSIGN_OR_RETURN(const int64_t ctx, c.Int("max_position_embeddings", 4096));
  MOE_ASSIGN_OR_RETURN(const double eps, c.Float("layer_norm_epsilon", 1e-5));
  MOE_ASSIGN_OR_RETURN(int64_t head_dim, c.Int("head_dim", 0));
  if (head_dim <= 0) {
    MOE_ASSIGN_OR_RETURN(head_dim, c.Int("attention_head_dim", d / heads));
  }
  k.SetInt("embedding_length", d);
  k.SetInt("block_count", layers);
  k.SetInt("attention.head_count", heads);
  k.SetInt("attention.key_length", head_dim);
  k.SetInt("attention.value_length", head_dim);
  k.SetInt("context_length", ctx);
  k.SetFloat("attention.layer_norm_rms_epsilon", eps);

  MOE_ASSIGN_OR_RETURN(const int64_t moe_ff, c.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(const std::string pattern, c.String("hybrid_override_pattern", ""));
  if (static_cast<int64_t>(pattern.size()) != layers) {
    return absl::InvalidArgumentError(absl::StrCat("config.json hybrid_override_pattern has ",
                                                   pattern.size(), " layers of ", layers));
  }
  std::vector<int64_t> kv(layers), ff(layers);
  for (int64_t l = 0; l < layers; ++l) {
    const char p = pattern[l];
    if (p != 'M' && p != '*' && p != 'E') {
      return absl::UnimplementedError(absl::StrCat("config.json hybrid_override_pattern layer ", l,
                                                   " is '", std::string(1, p),
                                                   "' (M, * and E are supported)"));
    }
    kv[l] = p == '*' ? kv_heads : 0;
    ff[l] = p == 'E' ? moe_ff : 0;
  }
  k.SetIntArray("attention.head_count_kv", std::move(kv));

  MOE_ASSIGN_OR_RETURN(const int64_t ssm_heads, c.Int("mamba_num_heads", 128));
  MOE_ASSIGN_OR_RETURN(const int64_t ssm_head_dim, c.Int("mamba_head_dim", 64));
  MOE_ASSIGN_OR_RETURN(const int64_t state, c.Int("ssm_state_size", 128));
  MOE_ASSIGN_OR_RETURN(const int64_t groups, c.Int("n_groups", 8));
  MOE_ASSIGN_OR_RETURN(const int64_t conv, c.Int("conv_kernel", 4));
  SetMamba2Keys({conv, ssm_heads * ssm_head_dim, state, ssm_heads, groups}, &k);

  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("n_routed_experts"));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok"));
  MOE_ASSIGN_OR_RETURN(const int64_t shared, c.Int("moe_shared_expert_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(const bool norm, c.Bool("norm_topk_prob", true));
  MOE_ASSIGN_OR_RETURN(const double scale, c.Float("routed_scaling_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(const int64_t group_count, c.Int("n_group", 1));
  MOE_ASSIGN_OR_RETURN(const int64_t group_used, c.Int("topk_group", 1));
  SetMixtureKeys({experts, used, 0, moe_ff, 1, 0, norm, scale, group_count, group_used, 2}, &k);
  k.SetIntArray("feed_forward_length", std::move(ff));  // per layer, in place of the dense width
  k.SetInt("expert_shared_feed_forward_length", shared);
  // Nemotron 3 Super's latent experts (null or absent: none).
  if (const nlohmann::json* latent = c.Get("moe_latent_size");
      latent != nullptr && !latent->is_null()) {
    MOE_ASSIGN_OR_RETURN(const int64_t size, c.Int("moe_latent_size"));
    k.SetInt("moe_latent_size", size);
  }
  out->selection_bias = true;  // the router's e_score_correction_bias
  return absl::OkStatus();
}

}  // namespace moe
