#include "lib/import/hf_metadata.h"

#include <cmath>
#include <string>
#include <vector>

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

absl::StatusOr<std::vector<int64_t>> HfMetadataKeys::IntArray(absl::string_view key) const {
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(absl::StrCat("config.json gives no value for '", key, "'"));
  }
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return absl::InvalidArgumentError(absl::StrCat("'", key, "' is not a list of integers"));
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

void SetMamba2Keys(const HfMamba2Shape& m, HfMetadataKeys* k) {
  k->SetInt("ssm.conv_kernel", m.conv_kernel);
  k->SetInt("ssm.inner_size", m.inner);
  k->SetInt("ssm.state_size", m.state);
  k->SetInt("ssm.time_step_rank", m.heads);
  k->SetInt("ssm.group_count", m.groups);
}

absl::Status SetLayerKindKeys(const ConfigJson& c, int64_t layers, int64_t kv_heads,
                              absl::string_view attending, absl::string_view other,
                              HfMetadataKeys* k) {
  const nlohmann::json* types = c.Get("layer_types");
  if (types == nullptr || !types->is_array() || static_cast<int64_t>(types->size()) != layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json layer_types must name the kind of each of the ", layers, " layers"));
  }
  std::vector<int64_t> per_layer_kv;
  for (const nlohmann::json& t : *types) {
    const std::string kind = t.is_string() ? t.get<std::string>() : std::string();
    if (!t.is_string() || (!other.empty() && kind != attending && kind != other)) {
      std::string message = absl::StrCat("config.json layer_types holds ", t.dump());
      if (!other.empty())
        absl::StrAppend(&message, " (each is \"", attending, "\" or \"", other, "\")");
      return absl::InvalidArgumentError(message);
    }
    per_layer_kv.push_back(kind == attending ? kv_heads : 0);
  }
  k->SetIntArray("attention.head_count_kv", std::move(per_layer_kv));
  return absl::OkStatus();
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

// Llama 3's frequency divisors over `dim` dimensions of RoPE base `theta`, as llama.cpp's
// converter computes them (LlamaModel.generate_extra_tensors): the frequencies in float, the
// rest in double, each divisor stored as a float.
absl::StatusOr<std::vector<float>> Llama3RopeFactors(const nlohmann::json& scaling,
                                                     const std::string& where, int64_t dim,
                                                     double theta) {
  const ConfigJson s(scaling, where + ".");
  MOE_ASSIGN_OR_RETURN(double factor, s.Float("factor", 8.0));
  MOE_ASSIGN_OR_RETURN(double low, s.Float("low_freq_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(double high, s.Float("high_freq_factor", 4.0));
  MOE_ASSIGN_OR_RETURN(double old_context, s.Float("original_max_position_embeddings", 8192));
  if (!(factor > 0) || !(low > 0) || !(high > 0) || !(old_context > 0) || dim <= 0 ||
      dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json ", where, " (llama3): factor ", factor, ", low_freq_factor ", low,
                     ", high_freq_factor ", high, ", original context ", old_context));
  }
  constexpr double kPi = 3.14159265358979323846;
  const double low_wavelen = old_context / low, high_wavelen = old_context / high;
  std::vector<float> factors;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq =
        1.0f / std::pow(static_cast<float>(theta), static_cast<float>(i) / static_cast<float>(dim));
    const double wavelen = 2 * kPi / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(factor));
    } else if (high == low) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json ", where,
                       " (llama3): a wavelength of exactly the original context with "
                       "low_freq_factor equal to high_freq_factor has no smooth factor"));
    } else {
      const double smooth = (old_context / wavelen - low) / (high - low);
      factors.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return factors;
}

}  // namespace

absl::Status ReadLlama3RopeScaling(const nlohmann::json& j, int64_t dim, double theta,
                                   std::vector<float>* factors) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json '", key, "' is not an object"));
    }
    std::string type = "default";
    for (const char* k : {"rope_type", "type"}) {
      if (auto t = it->find(k); t != it->end() && t->is_string()) type = t->get<std::string>();
    }
    if (type == "llama3") {
      MOE_ASSIGN_OR_RETURN(*factors, Llama3RopeFactors(*it, key, dim, theta));
    } else if (type != "default") {
      return absl::UnimplementedError(absl::StrCat("config.json ", key, " of type '", type,
                                                   "' is not supported (default, llama3)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WindowedLayerPeriod(const nlohmann::json& types, int64_t layers,
                                            absl::string_view windowed) {
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json layer_types is not a list of ", layers, " layer types"));
  }
  std::vector<bool> in_window;
  for (const nlohmann::json& t : types) {
    if (t.is_string() && t.get<std::string>() == windowed) {
      in_window.push_back(true);
    } else if (t == "full_attention") {
      in_window.push_back(false);
    } else {
      return absl::UnimplementedError(absl::StrCat("config.json layer_types holds ", t.dump(), " (",
                                                   windowed, ", full_attention)"));
    }
  }
  return RepeatingLayerPeriod(in_window, "layer_types", windowed, "full_attention");
}

absl::StatusOr<int64_t> RepeatingLayerPeriod(const std::vector<bool>& on, absl::string_view key,
                                             absl::string_view on_name,
                                             absl::string_view off_name) {
  const int64_t layers = static_cast<int64_t>(on.size());
  int64_t period = 0;
  while (period < layers && on[period]) ++period;
  if (period == layers) return 0;
  ++period;
  for (int64_t l = 0; l < layers; ++l) {
    if (on[l] != (l % period < period - 1)) {
      return absl::UnimplementedError(
          absl::StrCat("config.json ", key, " does not repeat one pattern of ", period - 1, " ",
                       on_name, " layers and one ", off_name, " layer (layer ", l, ")"));
    }
  }
  return period;
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

absl::Status RefuseDenseMlpLayers(const ConfigJson& c, absl::string_view family) {
  MOE_ASSIGN_OR_RETURN(const int64_t step, c.Int("decoder_sparse_step", 1));
  const nlohmann::json* dense = c.Get("mlp_only_layers");
  if (step != 1 || (dense != nullptr && !(dense->is_array() && dense->empty()))) {
    return absl::UnimplementedError(absl::StrCat(
        "config.json decoder_sparse_step / mlp_only_layers name dense MLP layers, which ", family,
        " does not support"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> MropeSections(const nlohmann::json& j,
                                                   std::vector<int64_t> sections) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_object()) continue;
    auto s = it->find("mrope_section");
    if (s == it->end() || s->is_null()) continue;
    if (!s->is_array() || s->size() > 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json ", key, ".mrope_section is not a list of up to 4 sizes"));
    }
    sections.clear();
    for (const nlohmann::json& v : *s) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("config.json ", key, ".mrope_section holds ", v.dump()));
      }
      sections.push_back(v.get<int64_t>());
    }
  }
  sections.resize(4, 0);
  return sections;
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
