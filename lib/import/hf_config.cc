#include "lib/import/hf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/json_text.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_config_json.h"
#include "lib/import/hf_metadata.h"
#include "lib/import/hparams_from_keys.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using Json = nlohmann::json;

using Config = ConfigJson;

struct HfArchName {
  const char* hf;
  const char* model_type;
  Arch arch;
  // The families read through llama.cpp's keys (hf_metadata.h); null: read here.
  absl::Status (*keys)(const Json&, HfFamilyConfig*);
  // Multimodal wrappers: the language model's settings are this object of config.json, its
  // tensors' names start with tensor_prefix; the other towers are not read.
  const char* text_config = nullptr;
  const char* tensor_prefix = "";
  const char* model_prefix = "model.";  // HfConfig::model_prefix
};
constexpr HfArchName kArchs[] = {
    {"MixtralForCausalLM", "mixtral", Arch::kLlama, nullptr},
    {"Qwen2MoeForCausalLM", "qwen2_moe", Arch::kQwen2Moe, nullptr},
    {"OlmoeForCausalLM", "olmoe", Arch::kOlmoe, nullptr},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Arch::kQwen3Moe, nullptr},
    {"Glm4MoeForCausalLM", "glm4_moe", Arch::kGlm4Moe, &Glm4MoeKeys},
    {"DeepseekForCausalLM", "deepseek", Arch::kDeepseek, &DeepseekMoeKeys},
    {"DeepseekV2ForCausalLM", "deepseek_v2", Arch::kDeepseek2, &DeepseekV2Keys},
    {"DeepseekV3ForCausalLM", "deepseek_v3", Arch::kDeepseek2, &DeepseekV3Keys},
    {"GptOssForCausalLM", "gpt_oss", Arch::kGptOss, &GptOssKeys},
    {"Ernie4_5_MoeForCausalLM", "ernie4_5_moe", Arch::kErnie45Moe, &Ernie45MoeKeys},
    {"GraniteMoeForCausalLM", "granitemoe", Arch::kGraniteMoe, &GraniteMoeKeys},
    {"GraniteMoeSharedForCausalLM", "granitemoeshared", Arch::kGraniteMoe, &GraniteMoeKeys},
    {"GraniteMoeHybridForCausalLM", "granitemoehybrid", Arch::kGraniteHybrid,
     &GraniteMoeHybridKeys},
    {"Llama4ForConditionalGeneration", "llama4", Arch::kLlama4, &Llama4Keys, "text_config",
     "language_model."},
    {"Llama4ForCausalLM", "llama4_text", Arch::kLlama4, &Llama4Keys},
    {"BailingMoeV2ForCausalLM", "bailing_moe_v2", Arch::kBailingMoe2, &BailingMoeV2Keys},
    {"MiniMaxM2ForCausalLM", "minimax_m2", Arch::kMinimaxM2, &MinimaxM2Keys},
    {"Dots1ForCausalLM", "dots1", Arch::kDots1, &Dots1Keys},
    {"Lfm2MoeForCausalLM", "lfm2_moe", Arch::kLfm2Moe, &Lfm2MoeKeys},
    {"NemotronHForCausalLM", "nemotron_h", Arch::kNemotronHMoe, &NemotronHKeys},
    {"Qwen3NextForCausalLM", "qwen3_next", Arch::kQwen3Next, &Qwen3NextKeys},
    {"Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", Arch::kQwen35Moe, &Qwen35MoeKeys,
     "text_config", "", "model.language_model."},
    {"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", Arch::kQwen35Moe, &Qwen35MoeKeys},
    {"Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe", Arch::kQwen3VlMoe, &Qwen3VlMoeKeys,
     "text_config", "", "model.language_model."},
};

absl::StatusOr<const HfArchName*> FindArch(const Json& j) {
  std::string named;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty()) {
    if (!(*it)[0].is_string())
      return absl::InvalidArgumentError(
          "config.json 'architectures' "
          "does not hold strings");
    named = (*it)[0].get<std::string>();
    for (const HfArchName& a : kArchs) {
      if (named == a.hf) return &a;
    }
  } else if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) {
    named = mt->get<std::string>();
    for (const HfArchName& a : kArchs) {
      if (named == a.model_type) return &a;
    }
  }
  if (named.empty()) {
    return absl::InvalidArgumentError(
        "config.json names no architecture ('architectures' and "
        "'model_type' are both absent)");
  }
  std::vector<absl::string_view> supported;
  for (const HfArchName& a : kArchs) supported.push_back(a.hf);
  return absl::UnimplementedError(absl::StrCat(
      "unsupported architecture '", named, "' (supported: ", absl::StrJoin(supported, ", "), ")"));
}

// config.json -> the family's llama.cpp keys -> the family's rules, as for its GGUF conversion.
// `j` is the language model's settings, `top` the whole config.json.
absl::Status ParseViaKeys(const Json& j, const Json& top, const HfArchName& arch, HfConfig* out) {
  HfFamilyConfig family;
  MOE_RETURN_IF_ERROR(arch.keys(j, &family));
  MOE_ASSIGN_OR_RETURN(
      out->hp, HParamsFromKeys(family.keys, family.rope_scaling_type, ArchitectureOf(arch.arch)));
  const Config c(j);
  MOE_ASSIGN_OR_RETURN(out->hp.n_vocab, c.Int("vocab_size"));
  // A wrapper's own tie_word_embeddings stands where its text_config does not say.
  MOE_ASSIGN_OR_RETURN(const bool tied_default,
                       Config(top).Bool("tie_word_embeddings", family.tied_output_default));
  MOE_ASSIGN_OR_RETURN(out->hp.tied_output, c.Bool("tie_word_embeddings", tied_default));
  out->hp.has_selection_bias = family.selection_bias;
  out->hp.qk_norm = family.qk_norm;
  if (family.refine) {
    MOE_RETURN_IF_ERROR(family.refine(&out->hp));
  }
  out->rope_freq_factors = std::move(family.rope_freq_factors);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfConfig> ParseHfConfig(const std::string& json_text) {
  auto parsed = ParseJsonText(json_text);
  if (!parsed.ok()) return Annotate(parsed.status(), "config.json");
  const Json j = *std::move(parsed);
  if (!j.is_object()) return absl::InvalidArgumentError("config.json is not a JSON object");
  HfConfig out;
  MOE_ASSIGN_OR_RETURN(const HfArchName* arch, FindArch(j));
  out.arch = arch->arch;
  out.hf_architecture = arch->hf;
  out.tensor_prefix = arch->tensor_prefix;
  out.model_prefix = arch->model_prefix;
  if (arch->text_config != nullptr) {
    auto text = j.find(arch->text_config);
    if (text == j.end() || !text->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json has no '", arch->text_config, "' object (", arch->hf,
                       " keeps the language model's settings there)"));
    }
    MOE_RETURN_IF_ERROR(ParseViaKeys(*text, j, *arch, &out));
    return out;
  }
  if (arch->keys != nullptr) {
    MOE_RETURN_IF_ERROR(ParseViaKeys(j, j, *arch, &out));
    return out;
  }
  const bool mixtral = out.arch == Arch::kLlama, qwen2 = out.arch == Arch::kQwen2Moe,
             olmoe = out.arch == Arch::kOlmoe, qwen3 = out.arch == Arch::kQwen3Moe;
  Config c(j);
  HParams& h = out.hp;

  MOE_ASSIGN_OR_RETURN(std::string act, c.String("hidden_act", "silu"));
  if (act != "silu") {
    return absl::UnimplementedError(
        absl::StrCat("config.json hidden_act '", act, "' is not supported (only silu)"));
  }
  MOE_ASSIGN_OR_RETURN(h.n_vocab, c.Int("vocab_size"));
  MOE_ASSIGN_OR_RETURN(h.n_embd, c.Int("hidden_size"));
  MOE_ASSIGN_OR_RETURN(h.n_layer, c.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(h.n_head, c.Int("num_attention_heads"));
  if (h.n_head == 0) return absl::InvalidArgumentError("config.json num_attention_heads is 0");
  MOE_ASSIGN_OR_RETURN(h.n_head_kv, c.Int("num_key_value_heads", h.n_head));
  MOE_ASSIGN_OR_RETURN(h.head_dim, c.Int("head_dim", h.n_embd / h.n_head));
  h.rope_dim = h.head_dim;
  h.value_dim = h.head_dim;
  MOE_ASSIGN_OR_RETURN(double partial, c.Float("partial_rotary_factor", 1.0));
  if (partial != 1.0) {
    return absl::UnimplementedError(
        "config.json partial_rotary_factor other than 1 is not supported");
  }
  MOE_ASSIGN_OR_RETURN(h.n_ctx_train, c.Int("max_position_embeddings", 4096));

  // Sliding-window attention over a window at least as long as the context is full attention;
  // so a window shorter than max_position_embeddings bounds the context instead.
  MOE_ASSIGN_OR_RETURN(bool use_sliding, c.Bool("use_sliding_window", mixtral));
  if (use_sliding) {
    MOE_ASSIGN_OR_RETURN(int64_t window, c.Int("sliding_window", 0));
    if (window > 0) h.n_ctx_train = std::min(h.n_ctx_train, window);
  }

  MOE_ASSIGN_OR_RETURN(double theta, c.Float("rope_theta", mixtral ? 1e6 : 10000.0));
  if (const Json* rp = c.Get("rope_parameters");
      rp && rp->contains("rope_theta") && (*rp)["rope_theta"].is_number()) {
    theta = (*rp)["rope_theta"].get<double>();  // transformers v5 moved it here
  }
  h.rope_freq_base = static_cast<float>(theta);
  MOE_RETURN_IF_ERROR(ReadLlama3RopeScaling(j, h.rope_dim, theta, &out.rope_freq_factors));
  MOE_ASSIGN_OR_RETURN(double eps, c.Float("rms_norm_eps", (qwen2 || qwen3) ? 1e-6 : 1e-5));
  h.rms_eps = static_cast<float>(eps);
  h.rope_style = RopeStyle::kNeox;  // transformers' rotate_half: weights stay unpermuted
  MOE_ASSIGN_OR_RETURN(h.tied_output, c.Bool("tie_word_embeddings", false));

  if (mixtral) {
    MOE_ASSIGN_OR_RETURN(h.n_expert, c.Int("num_local_experts", 8));
    MOE_ASSIGN_OR_RETURN(h.n_ff_expert, c.Int("intermediate_size"));
    h.norm_topk_prob = true;  // MixtralSparseMoeBlock always renormalises
  } else {
    MOE_ASSIGN_OR_RETURN(h.n_expert, c.Int("num_experts"));
    MOE_ASSIGN_OR_RETURN(h.n_ff_expert,
                         c.Int(olmoe ? "intermediate_size" : "moe_intermediate_size"));
    MOE_ASSIGN_OR_RETURN(h.norm_topk_prob, c.Bool("norm_topk_prob", false));
  }
  MOE_ASSIGN_OR_RETURN(h.n_expert_used, c.Int("num_experts_per_tok", 2));
  if (h.n_expert == 0) {
    return absl::UnimplementedError("config.json has no experts: libmoe runs MoE models only");
  }

  // Qwen MoE models may interleave dense MLP layers; every layer here must be sparse.
  if (qwen2 || qwen3) {
    MOE_RETURN_IF_ERROR(RefuseDenseMlpLayers(c, out.hf_architecture));
  }
  if (qwen2) {
    MOE_ASSIGN_OR_RETURN(h.has_qkv_bias, c.Bool("qkv_bias", true));
    MOE_ASSIGN_OR_RETURN(h.n_ff_shared, c.Int("shared_expert_intermediate_size", 0));
    h.shared_expert_gate = h.n_ff_shared > 0;
  } else {
    // OLMoE and Qwen3-MoE put attention_bias on o_proj too, which the runtime has no slot for.
    MOE_ASSIGN_OR_RETURN(bool bias, c.Bool("attention_bias", false));
    if (bias) {
      return absl::UnimplementedError("config.json attention_bias true is not supported");
    }
  }
  if (olmoe) {
    if (c.Get("clip_qkv") != nullptr) {
      return absl::UnimplementedError(
          "config.json clip_qkv is set: clamping q/k/v is not supported");
    }
    h.qk_norm = QkNorm::kFull;
  }
  if (qwen3) h.qk_norm = QkNorm::kPerHead;
  return out;
}

}  // namespace moe
