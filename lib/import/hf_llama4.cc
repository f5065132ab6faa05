// Llama4ForConditionalGeneration (Llama-4-Scout-17B-16E, -Maverick-17B-128E: the language model's
// settings in text_config) and Llama4ForCausalLM (the language model alone) config.json -> llama4
// keys, with Llama4TextConfig's defaults, as llama.cpp's Llama4Model converter writes them. What
// a GGUF file cannot say and llama.cpp therefore fixes (chunks of 8192, a NoPE layer every
// fourth, the query temperature 0.1 over 8192, no QK-norm for 128 experts) is taken from
// config.json instead, as transformers takes it: the published checkpoints give llama.cpp's
// values, and a checkpoint with others runs as transformers runs it. The vision tower is not read.
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_metadata.h"

namespace moe {
namespace {

// The period p of no_rope_layers (1: RoPE, 0: NoPE, as transformers tests them: by truth) when
// its first `layers` flags are 0 exactly where (l + 1) % p == 0, as RepeatingLayerPeriod finds
// it; 0 when none is.
absl::StatusOr<int64_t> NopePeriod(const nlohmann::json& flags, int64_t layers) {
  if (!flags.is_array() || static_cast<int64_t>(flags.size()) < layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json no_rope_layers is not a list of at least ", layers, " 0/1 flags"));
  }
  std::vector<bool> rope;
  for (int64_t l = 0; l < layers; ++l) {
    const nlohmann::json& f = flags[l];
    if (f.is_boolean()) {
      rope.push_back(f.get<bool>());
    } else if (f.is_number_integer()) {
      rope.push_back(f.get<int64_t>() != 0);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json no_rope_layers[", l, "] is ", f.dump(), ", not 0 or 1"));
    }
  }
  return RepeatingLayerPeriod(rope, "no_rope_layers", "RoPE", "NoPE");
}

// The step s of moe_layers when it lists exactly the layers s - 1, 2s - 1, ... below `layers`.
absl::StatusOr<int64_t> ExpertLayerStep(const nlohmann::json& list, int64_t layers) {
  if (!list.is_array()) {
    return absl::InvalidArgumentError("config.json moe_layers is not a list of layer indices");
  }
  if (list.empty()) {
    return absl::UnimplementedError("config.json moe_layers is empty: a model without experts");
  }
  if (!list[0].is_number_integer() || list[0].get<int64_t>() < 0) {
    return absl::InvalidArgumentError("config.json moe_layers[0] is not a layer index");
  }
  const int64_t step = list[0].get<int64_t>() + 1;
  std::vector<int64_t> want;
  for (int64_t l = step - 1; l < layers; l += step) want.push_back(l);
  std::vector<int64_t> got;
  for (const nlohmann::json& v : list) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json moe_layers holds ", v.dump(), ", not a layer index"));
    }
    got.push_back(v.get<int64_t>());
  }
  if (got != want) {
    return absl::UnimplementedError(
        absl::StrCat("config.json moe_layers is not every ", step, "th layer from layer ", step - 1,
                     " on (experts in other patterns are not supported)"));
  }
  return step;
}

// attn_temperature_tuning: transformers tests it by truth, and the published configs write 4.
absl::StatusOr<bool> Truth(const ConfigJson& c, const char* key, bool def) {
  const nlohmann::json* v = c.Get(key);
  if (v == nullptr) return def;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  return absl::InvalidArgumentError(
      absl::StrCat("config.json ", c.Name(key), " is ", v->dump(), ", not true/false"));
}

}  // namespace

absl::Status Llama4Keys(const nlohmann::json& j, HfFamilyConfig* out) {
  const ConfigJson c(j);
  HfMetadataKeys& k = out->keys;
  MOE_RETURN_IF_ERROR(SetCommonKeys(c, {131072, 1e-5, 500000.0}, &k));
  MOE_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  MOE_ASSIGN_OR_RETURN(const int64_t head_dim, SetHeadKeys(c, heads, &k));
  k.SetInt("rope.dimension_count", head_dim);
  MOE_ASSIGN_OR_RETURN(const double theta, RopeTheta(j, 500000.0));
  k.SetFloat("rope.freq_base", theta);
  MOE_RETURN_IF_ERROR(ReadLlama3RopeScaling(j, head_dim, theta, &out->rope_freq_factors));
  MOE_ASSIGN_OR_RETURN(const bool bias, c.Bool("attention_bias", false));
  if (bias) {
    return absl::UnimplementedError(
        "config.json attention_bias true (biases on q/k/v and o_proj) is not supported for "
        "llama4");
  }

  MOE_ASSIGN_OR_RETURN(const int64_t experts, c.Int("num_local_experts", 16));
  MOE_ASSIGN_OR_RETURN(const int64_t used, c.Int("num_experts_per_tok", 1));
  MOE_ASSIGN_OR_RETURN(const int64_t ff, c.Int("intermediate_size", 8192));
  MOE_ASSIGN_OR_RETURN(const int64_t dense_ff, c.Int("intermediate_size_mlp", 16384));
  MOE_ASSIGN_OR_RETURN(int64_t step, c.Int("interleave_moe_layer_step", 1));
  if (const nlohmann::json* list = c.Get("moe_layers")) {
    MOE_ASSIGN_OR_RETURN(step, ExpertLayerStep(*list, layers));
  } else if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json interleave_moe_layer_step ", step, " (at least 1)"));
  }
  k.SetInt("expert_count", experts);
  k.SetInt("expert_used_count", used);
  k.SetInt("expert_feed_forward_length", ff);
  k.SetInt("feed_forward_length", dense_ff);
  k.SetInt("interleave_moe_layer_step", step);

  // NoPE layers: no_rope_layers when it is a non-empty list, else one every
  // no_rope_layer_interval layers (Llama4TextConfig's rule).
  int64_t nope_period = 0;
  const nlohmann::json* flags = c.Get("no_rope_layers");
  if (flags != nullptr && !(flags->is_array() && flags->empty())) {
    MOE_ASSIGN_OR_RETURN(nope_period, NopePeriod(*flags, layers));
  } else {
    MOE_ASSIGN_OR_RETURN(nope_period, c.Int("no_rope_layer_interval", 4));
    if (nope_period < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json no_rope_layer_interval ", nope_period, " (at least 1)"));
    }
  }
  // Chunked layers: layer_types, by default the RoPE layers.
  int64_t chunk_period = nope_period;
  if (const nlohmann::json* types = c.Get("layer_types")) {
    MOE_ASSIGN_OR_RETURN(chunk_period, WindowedLayerPeriod(*types, layers, "chunked_attention"));
  }
  const bool chunked = chunk_period != 1;  // 1: every layer attends to the whole context
  MOE_ASSIGN_OR_RETURN(const int64_t chunk, c.Int("attention_chunk_size", 8192));
  if (chunked && (c.IsNull("attention_chunk_size") || chunk <= 0)) {
    return absl::UnimplementedError(
        absl::StrCat("config.json attention_chunk_size ",
                     c.IsNull("attention_chunk_size") ? std::string("null") : absl::StrCat(chunk),
                     " with chunked_attention layers is not supported (a positive chunk size)"));
  }

  MOE_ASSIGN_OR_RETURN(const bool tuning, Truth(c, "attn_temperature_tuning", true));
  MOE_ASSIGN_OR_RETURN(const double floor_scale, c.Float("floor_scale", 8192));
  MOE_ASSIGN_OR_RETURN(const double attn_scale, c.Float("attn_scale", 0.1));
  const int64_t floor = static_cast<int64_t>(floor_scale);
  if (tuning && nope_period > 0 && (floor < 1 || static_cast<double>(floor) != floor_scale)) {
    return absl::UnimplementedError(absl::StrCat("config.json floor_scale ", floor_scale,
                                                 " is not supported (a whole number of tokens)"));
  }
  MOE_ASSIGN_OR_RETURN(const bool qk_norm, c.Bool("use_qk_norm", true));
  out->qk_norm = qk_norm ? QkNorm::kPerHeadUnweighted : QkNorm::kNone;

  out->refine = [=](HParams* h) {
    h->nope_period = nope_period;
    h->attn_temp_scale = tuning && nope_period > 0 ? static_cast<float>(attn_scale) : 0.f;
    h->attn_temp_floor = tuning && nope_period > 0 ? floor : 0;
    if (!chunked) {
      h->sliding_window = 0;
      h->swa_period = 0;
      h->window_chunked = false;
    } else {
      h->sliding_window = chunk;
      // Every layer chunked: a period longer than the model (l % p < p - 1 for every layer).
      h->swa_period = chunk_period == 0 ? layers + 1 : chunk_period;
    }
    return absl::OkStatus();
  };
  return absl::OkStatus();
}

}  // namespace moe
