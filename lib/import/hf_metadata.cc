#include "lib/import/hf_metadata.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {

absl::StatusOr<int64_t> HfMetadataKeys::Int(absl::string_view key,
                                            std::optional<int64_t> def) const {
  auto it = values_.find(key);
  if (it == values_.end()) {
    if (def) return *def;
    return absl::NotFoundError(absl::StrCat("config.json gives no value for '", key, "'"));
  }
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
  return absl::InvalidArgumentError(absl::StrCat("'", key, "' is not an integer"));
}

absl::StatusOr<float> HfMetadataKeys::Float(absl::string_view key, float def) const {
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (const double* v = std::get_if<double>(&it->second)) return static_cast<float>(*v);
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return static_cast<float>(*v);
  return absl::InvalidArgumentError(absl::StrCat("'", key, "' is not a number"));
}

absl::StatusOr<bool> HfMetadataKeys::Bool(absl::string_view key, bool def) const {
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (const bool* v = std::get_if<bool>(&it->second)) return *v;
  return absl::InvalidArgumentError(absl::StrCat("'", key, "' is not true/false"));
}

void SetMixtureKeys(const HfMixtureShape& m, HfMetadataKeys* k) {
  k->SetInt("expert_count", m.experts);
  k->SetInt("expert_used_count", m.used);
  k->SetInt("feed_forward_length", m.dense_ff);
  k->SetInt("expert_feed_forward_length", m.expert_ff);
  k->SetInt("expert_shared_count", m.shared);
  k->SetInt("leading_dense_block_count", m.dense_layers);
  k->SetBool("expert_weights_norm", m.norm);
  k->SetFloat("expert_weights_scale", m.scale);
  k->SetInt("expert_group_count", m.groups);
  k->SetInt("expert_group_used_count", m.groups_used);
  k->SetInt("expert_gating_func", m.gating);
}

absl::StatusOr<int64_t> SetHeadKeys(const ConfigJson& c, int64_t kv_default, HfMetadataKeys* k) {
  MOE_ASSIGN_OR_RETURN(int64_t hidden, c.Int("hidden_size"));
  MOE_ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(int64_t kv_heads, c.Int("num_key_value_heads", kv_default));
  MOE_ASSIGN_OR_RETURN(int64_t head_dim, c.Int("head_dim", hidden / heads));
  k->SetInt("attention.head_count_kv", kv_heads);
  k->SetInt("attention.key_length", head_dim);
  k->SetInt("attention.value_length", head_dim);
  return head_dim;
}

absl::Status SetCommonKeys(const ConfigJson& c, const HfCommonDefaults& d, HfMetadataKeys* k) {
  MOE_ASSIGN_OR_RETURN(std::string act, c.String("hidden_act", "silu"));
  if (act != "silu") {
    return absl::UnimplementedError(
        absl::StrCat("config.json hidden_act '", act, "' is not supported (only silu)"));
  }
  MOE_ASSIGN_OR_RETURN(int64_t hidden, c.Int("hidden_size"));
  MOE_ASSIGN_OR_RETURN(int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  if (heads == 0) return absl::InvalidArgumentError("config.json num_attention_heads is 0");
  MOE_ASSIGN_OR_RETURN(int64_t ctx, c.Int("max_position_embeddings", d.max_position_embeddings));
  MOE_ASSIGN_OR_RETURN(double eps, c.Float("rms_norm_eps", d.rms_norm_eps));
  k->SetInt("embedding_length", hidden);
  k->SetInt("block_count", layers);
  k->SetInt("attention.head_count", heads);
  k->SetInt("context_length", ctx);
  k->SetFloat("attention.layer_norm_rms_epsilon", eps);
  return absl::OkStatus();
}

namespace {

const nlohmann::json* RopeParameters(const nlohmann::json& j) {
  auto it = j.find("rope_parameters");
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

// transformers' get_mscale: YaRN's attention temperature for a context extended `scale` times.
double GetMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

absl::StatusOr<double> RopeTheta(const nlohmann::json& j, double def) {
  MOE_ASSIGN_OR_RETURN(double theta, ConfigJson(j).Float("rope_theta", def));
  if (const nlohmann::json* rp = RopeParameters(j)) {
    MOE_ASSIGN_OR_RETURN(theta, ConfigJson(*rp, "rope_parameters.").Float("rope_theta", theta));
  }
  return theta;
}

absl::StatusOr<double> PartialRotaryFactor(const nlohmann::json& j, double def) {
  MOE_ASSIGN_OR_RETURN(double f, ConfigJson(j).Float("partial_rotary_factor", def));
  if (const nlohmann::json* rp = RopeParameters(j)) {
    MOE_ASSIGN_OR_RETURN(f, ConfigJson(*rp, "rope_parameters.").Float("partial_rotary_factor", f));
  }
  return f;
}

absl::Status ReadRopeScaling(const nlohmann::json& j, YarnTemperature temperature,
                             const nlohmann::json* family_default, HfFamilyConfig* out) {
  const nlohmann::json* s = nullptr;
  std::string where;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json '", key, "' is not an object"));
    }
    s = &*it;
    where = key;
    break;
  }
  if (s == nullptr) {
    if (family_default == nullptr) return absl::OkStatus();
    s = family_default;
    where = "rope_scaling (the configuration class's default)";
  }
  const ConfigJson y(*s, where + ".");
  std::string type = "default";
  for (const char* k : {"type", "rope_type"}) {
    MOE_ASSIGN_OR_RETURN(type, y.String(k, type));
  }
  if (type == "default") return absl::OkStatus();
  if (type != "yarn") {
    return absl::UnimplementedError(absl::StrCat("config.json ", where, " of type '", type,
                                                 "' is not supported (default, yarn)"));
  }
  MOE_ASSIGN_OR_RETURN(int64_t max_pos, out->keys.Int("context_length"));
  MOE_ASSIGN_OR_RETURN(int64_t orig, y.Int("original_max_position_embeddings", max_pos));
  if (orig == 0) return absl::InvalidArgumentError(absl::StrCat(where, " original context is 0"));
  const double ratio = static_cast<double>(max_pos) / orig;
  MOE_ASSIGN_OR_RETURN(
      double factor,
      y.Float("factor", y.Get("original_max_position_embeddings") ? ratio : std::nan("")));
  if (std::isnan(factor)) {
    return absl::NotFoundError(absl::StrCat("config.json ", where, " (yarn) has no 'factor'"));
  }
  // transformers v4 replaces factor by max_position_embeddings / original_max_position_embeddings
  // when the latter is given, v5 does not: a checkpoint where they differ means two things.
  if (y.Get("original_max_position_embeddings") && std::fabs(ratio - factor) > 1e-6 * factor) {
    return absl::UnimplementedError(absl::StrCat(
        "config.json ", y.Name("factor"), " ", factor, " differs from max_position_embeddings / ",
        y.Name("original_max_position_embeddings"), " = ", ratio,
        ", which transformers versions read differently"));
  }
  if (!(factor >= 1)) {
    return absl::UnimplementedError(
        absl::StrCat("config.json ", y.Name("factor"), " ", factor, " is below 1"));
  }
  MOE_ASSIGN_OR_RETURN(double beta_fast, y.Float("beta_fast", 32));
  MOE_ASSIGN_OR_RETURN(double beta_slow, y.Float("beta_slow", 1));
  if (beta_fast == 0) beta_fast = 32;  // transformers: `get("beta_fast") or 32`
  if (beta_slow == 0) beta_slow = 1;
  // truncate false (gpt-oss) keeps the correction range unrounded in transformers; the runtime
  // rounds it as llama.cpp does, so a checkpoint runs as its GGUF conversion runs in llama.cpp.
  MOE_ASSIGN_OR_RETURN(bool truncate, y.Bool("truncate", true));
  (void)truncate;
  MOE_ASSIGN_OR_RETURN(double attention_factor, y.Float("attention_factor", std::nan("")));
  MOE_ASSIGN_OR_RETURN(double mscale, y.Float("mscale", 0));
  MOE_ASSIGN_OR_RETURN(double mscale_all_dim, y.Float("mscale_all_dim", 0));
  // transformers' cos/sin magnitude.
  double magnitude = attention_factor;
  if (std::isnan(magnitude)) {
    magnitude = mscale != 0 && mscale_all_dim != 0
                    ? GetMscale(factor, mscale) / GetMscale(factor, mscale_all_dim)
                    : GetMscale(factor, 1);
  }
  HfMetadataKeys& k = out->keys;
  if (temperature == YarnTemperature::kCosSin) {
    // The runtime multiplies rope.scaling.attn_factor by YaRN's own 1 + 0.1 ln(factor).
    k.SetFloat("rope.scaling.attn_factor", magnitude / GetMscale(factor, 1));
  } else {
    if (std::fabs(magnitude - 1) > 1e-6) {
      return absl::UnimplementedError(absl::StrCat(
          "config.json ", where, " gives RoPE's cos/sin a magnitude of ", magnitude, " (mscale ",
          mscale, ", mscale_all_dim ", mscale_all_dim,
          "); DeepSeek's YaRN as libmoe runs it needs 1 (mscale equal to mscale_all_dim)"));
    }
    k.SetFloat("rope.scaling.yarn_log_multiplier", 0.1 * mscale_all_dim);
  }
  out->rope_scaling_type = "yarn";
  k.SetFloat("rope.scaling.factor", factor);
  k.SetInt("rope.scaling.original_context_length", orig);
  k.SetFloat("rope.scaling.yarn_beta_fast", beta_fast);
  k.SetFloat("rope.scaling.yarn_beta_slow", beta_slow);
  return absl::OkStatus();
}

}  // namespace moe
