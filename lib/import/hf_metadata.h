// config.json seen as llama.cpp's metadata keys: the newer families (glm4moe, deepseek2, gpt-oss,
// ernie4_5-moe, granitemoe) map a Hugging Face config onto the keys llama.cpp's
// convert_hf_to_gguf.py would write for it, and the family's own rules (lib/model/arch/) read
// those, exactly as they read the GGUF file converted from the same checkpoint. What transformers
// would compute differently from those rules is refused here, naming the config.json key.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "lib/import/hf_config_json.h"
#include "lib/model/arch/architecture.h"
#include "nlohmann/json.hpp"

namespace moe {

class HfMetadataKeys final : public MetadataKeys {
 public:
  void SetInt(const std::string& key, int64_t v) { values_[key] = v; }
  void SetFloat(const std::string& key, double v) { values_[key] = v; }
  void SetBool(const std::string& key, bool v) { values_[key] = v; }
  void SetIntArray(const std::string& key, std::vector<int64_t> v) { values_[key] = std::move(v); }

  absl::StatusOr<int64_t> Int(absl::string_view key,
                              std::optional<int64_t> def = {}) const override;
  absl::StatusOr<float> Float(absl::string_view key, float def) const override;
  absl::StatusOr<bool> Bool(absl::string_view key, bool def) const override;
  bool Has(absl::string_view key) const override { return values_.count(key) > 0; }
  absl::StatusOr<std::vector<int64_t>> IntArray(absl::string_view key) const override;

 private:
  std::map<std::string, std::variant<int64_t, double, bool, std::vector<int64_t>>, std::less<>>
      values_;
};

// One family's config.json: its metadata keys, and what a GGUF file would state by its tensors.
struct HfFamilyConfig {
  HfMetadataKeys keys;
  std::string rope_scaling_type = "none";
  bool selection_bias = false;  // the router has e_score_correction_bias
  QkNorm qk_norm = QkNorm::kNone;
  // The configuration class's tie_word_embeddings when config.json does not say.
  bool tied_output_default = false;
  // rope_scaling of type llama3: the per-pair frequency divisors (rope_freqs); empty: none.
  std::vector<float> rope_freq_factors;
  // What config.json says of the settings a family's rules fix because llama.cpp's files cannot
  // state them (Llama 4's chunk size, NoPE layers, query temperature), applied to the HParams the
  // rules give; null: nothing to add.
  std::function<absl::Status(HParams*)> refine;
};

// The configuration class's defaults for the keys every family shares.
struct HfCommonDefaults {
  int64_t max_position_embeddings;
  double rms_norm_eps;
  double rope_theta;
};

// hidden_size, num_hidden_layers (block_count), num_attention_heads, max_position_embeddings,
// rms_norm_eps, rope_theta, num_experts_per_tok; hidden_act must be silu.
absl::Status SetCommonKeys(const ConfigJson& c, const HfCommonDefaults& d, HfMetadataKeys* keys);

// num_key_value_heads (kv_default when absent) and head_dim (hidden_size / num_attention_heads
// when absent) as attention.head_count_kv, key_length and value_length; returns head_dim.
// After SetCommonKeys, which refuses num_attention_heads 0.
absl::StatusOr<int64_t> SetHeadKeys(const ConfigJson& c, int64_t kv_default, HfMetadataKeys* k);

// A hybrid's layer_types (one entry per layer) as the head_count_kv list llama.cpp's converters
// write: kv_heads for a layer of kind `attending`, 0 for any other; when `other` is given, every
// other entry must be it. An error names a list of the wrong length or an unknown kind.
absl::Status SetLayerKindKeys(const ConfigJson& c, int64_t layers, int64_t kv_heads,
                              absl::string_view attending, absl::string_view other,
                              HfMetadataKeys* k);

// The routed and shared experts of the families with leading dense layers (glm4moe, deepseek2),
// as their configs name them.
struct HfMixtureShape {
  int64_t experts, used, dense_ff, expert_ff, shared, dense_layers;
  bool norm;
  double scale;
  int64_t groups, groups_used;
  int gating;  // llama.cpp's expert_gating_func: 1 softmax, 2 sigmoid
};
void SetMixtureKeys(const HfMixtureShape& m, HfMetadataKeys* keys);

// Mamba-2's sizes as the ssm.* keys llama.cpp's converters write (time_step_rank: the heads).
struct HfMamba2Shape {
  int64_t conv_kernel, inner, state, heads, groups;
};
void SetMamba2Keys(const HfMamba2Shape& m, HfMetadataKeys* keys);

// rope_theta or, in transformers v5's layout, rope_parameters.rope_theta.
absl::StatusOr<double> RopeTheta(const nlohmann::json& j, double def);
// partial_rotary_factor, top level or inside rope_parameters.
absl::StatusOr<double> PartialRotaryFactor(const nlohmann::json& j, double def);

// Qwen's MoE configs (Qwen2-MoE, Qwen3-MoE, Qwen3-Next, Qwen3.5, Qwen3-VL-MoE) may name dense MLP
// layers (decoder_sparse_step other than 1, mlp_only_layers); these families run experts in every
// layer, so such a config is an error naming the keys.
absl::Status RefuseDenseMlpLayers(const ConfigJson& c, absl::string_view family);

// A multimodal RoPE's mrope_section (in rope_scaling, or rope_parameters in transformers v5's
// layout) padded to the four sections llama.cpp's files hold (rope.dimension_sections);
// `sections`, the configuration class's default, when neither says.
absl::StatusOr<std::vector<int64_t>> MropeSections(const nlohmann::json& j,
                                                   std::vector<int64_t> sections);

// How a family applies YaRN's attention temperature.
enum class YarnTemperature {
  // transformers' attention_factor scales cos and sin (gpt-oss, GLM): rope.scaling.attn_factor.
  kCosSin,
  // DeepSeek: the scores scale by mscale(mscale_all_dim)^2 and cos/sin keep magnitude 1
  // (rope.scaling.yarn_log_multiplier = 0.1 mscale_all_dim, as llama.cpp's converter writes).
  kDeepseek,
};

// rope_scaling (or rope_parameters): none/default, or YaRN mapped to rope.scaling.*. Other types
// are refused. `family_default` is what the configuration class assumes when the config has no
// scaling object (gpt-oss: YaRN); null for none.
absl::Status ReadRopeScaling(const nlohmann::json& j, YarnTemperature temperature,
                             const nlohmann::json* family_default, HfFamilyConfig* out);

// rope_scaling (or rope_parameters) of the classic Llama-style families: none/default, or
// Llama 3's per-pair frequency divisors over `dim` RoPE dimensions of base `theta`, as llama.cpp's
// converter computes them (into `factors`); other types are refused.
absl::Status ReadLlama3RopeScaling(const nlohmann::json& j, int64_t dim, double theta,
                                   std::vector<float>* factors);

// The layer-type period of a layer_types list in which the layers named `windowed`
// ("sliding_attention", "chunked_attention") are those with l % p < p - 1 (llama.cpp's rule) and
// the others "full_attention": 0 when every layer is windowed, 1 when none is.
absl::StatusOr<int64_t> WindowedLayerPeriod(const nlohmann::json& types, int64_t layers,
                                            absl::string_view windowed);

// The period p of a per-layer pattern that repeats p - 1 layers `on`, then one not (on[l] ==
// (l % p < p - 1), llama.cpp's rule for sliding, chunked and RoPE layers): 0 when every layer is
// on. Without one, an error naming config.json's `key`, the two kinds (`on_name`, `off_name`)
// and the first layer that breaks the pattern.
absl::StatusOr<int64_t> RepeatingLayerPeriod(const std::vector<bool>& on, absl::string_view key,
                                             absl::string_view on_name, absl::string_view off_name);

// The families' config.json -> keys (hf_glm4moe.cc, hf_deepseek2.cc, hf_gpt_oss.cc).
absl::Status Glm4MoeKeys(const nlohmann::json& j, HfFamilyConfig* out);
absl::Status DeepseekV2Keys(const nlohmann::json& j, HfFamilyConfig* out);
absl::Status DeepseekV3Keys(const nlohmann::json& j, HfFamilyConfig* out);
absl::Status GptOssKeys(const nlohmann::json& j, HfFamilyConfig* out);
absl::Status Ernie45MoeKeys(const nlohmann::json& j, HfFamilyConfig* out);  // hf_ernie45moe.cc
absl::Status GraniteMoeKeys(const nlohmann::json& j, HfFamilyConfig* out);  // hf_granitemoe.cc
absl::Status Llama4Keys(const nlohmann::json& j, HfFamilyConfig* out);      // hf_llama4.cc
absl::Status BailingMoeV2Keys(const nlohmann::json& j, HfFamilyConfig* out);  // hf_bailingmoe2.cc
absl::Status MinimaxM2Keys(const nlohmann::json& j, HfFamilyConfig* out);     // hf_minimax_m2.cc
absl::Status Dots1Keys(const nlohmann::json& j, HfFamilyConfig* out);         // hf_dots1.cc
absl::Status Lfm2MoeKeys(const nlohmann::json& j, HfFamilyConfig* out);       // hf_lfm2moe.cc
absl::Status DeepseekMoeKeys(const nlohmann::json& j, HfFamilyConfig* out);   // hf_deepseek.cc
absl::Status NemotronHKeys(const nlohmann::json& j, HfFamilyConfig* out);     // hf_nemotron_h.cc
absl::Status GraniteMoeHybridKeys(const nlohmann::json& j,
                                  HfFamilyConfig* out);  // hf_granitehybrid.cc
absl::Status Qwen3NextKeys(const nlohmann::json& j, HfFamilyConfig* out);  // hf_qwen3next.cc
absl::Status Qwen35MoeKeys(const nlohmann::json& j, HfFamilyConfig* out);  // hf_qwen3next.cc
absl::Status Qwen3VlMoeKeys(const nlohmann::json& j, HfFamilyConfig* out);  // hf_qwen3vlmoe.cc
// A refine (HfFamilyConfig::refine) for the families whose GGUF conversion permutes q and k
// (llama.cpp's undo_permute: Granite, DeepSeek-MoE) so that its consecutive-pair RoPE matches
// transformers' rotate_half: on the checkpoint's own rows that is NEOX pairing, the same
// attention. Sets it.
absl::Status RotateHalfRope(HParams* h);  // hf_granitemoe.cc
// Granite's embedding_multiplier, residual_multiplier, logits_scaling and attention_multiplier
// (1 when absent) as embedding_scale, residual_scale, logit_scale and attention.scale.
absl::Status SetGraniteMultiplierKeys(const ConfigJson& c, HfMetadataKeys* k);  // hf_granitemoe.cc

}  // namespace moe
