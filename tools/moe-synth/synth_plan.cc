#include "tools/moe-synth/synth_plan.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe::synth {
namespace {

// Tensors in the order they are drawn: the random values of a file depend on it, so families
// that existed before keep their order (a benchmark file made again is the same file).
class Builder {
 public:
  Builder(const Shape& s, GgufWriter& w)
      : s_(s), w_(w), hd_(s.head_dim > 0 ? s.head_dim : s.embd / s.heads) {}

  int64_t head_dim() const { return hd_; }
  float InScale(int64_t fan_in) const { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

  void Key(const std::string& key, uint32_t v) { w_.SetU32(s_.arch + "." + key, v); }
  void KeyF(const std::string& key, float v) { w_.SetF32(s_.arch + "." + key, v); }
  void KeyB(const std::string& key, bool v) { w_.SetBool(s_.arch + "." + key, v); }
  void KeyS(const std::string& key, const std::string& v) { w_.SetString(s_.arch + "." + key, v); }
  void KeyI32Array(const std::string& key, std::vector<int32_t> v) {
    w_.SetI32Array(s_.arch + "." + key, std::move(v));
  }

  void Add(std::string name, std::vector<int64_t> shape, float std, float mean = 0,
           int64_t layer = -1) {
    tensors_.push_back({std::move(name), std::move(shape), std, mean, layer});
  }
  void AddLayer(int64_t l, const char* base, std::vector<int64_t> shape, float std,
                float mean = 0) {
    Add(absl::StrCat("blk.", l, ".", base), std::move(shape), std, mean, l);
  }
  void Norm(int64_t l, const char* base, int64_t n) { AddLayer(l, base, {n}, 0.05f, 1.0f); }

  // The keys every family has.
  void CommonKeys(int64_t block_count, int64_t feed_forward_length) {
    Key("context_length", static_cast<uint32_t>(s_.ctx));
    Key("embedding_length", static_cast<uint32_t>(s_.embd));
    Key("block_count", static_cast<uint32_t>(block_count));
    Key("feed_forward_length", static_cast<uint32_t>(feed_forward_length));
    Key("attention.head_count", static_cast<uint32_t>(s_.heads));
    Key("attention.head_count_kv", static_cast<uint32_t>(s_.kv_heads));
    KeyF("attention.layer_norm_rms_epsilon", 1e-6f);
    KeyF("rope.freq_base", s_.rope_base);
    Key("expert_count", static_cast<uint32_t>(s_.experts));
    Key("expert_used_count", static_cast<uint32_t>(s_.top_k));
    Key("expert_feed_forward_length", static_cast<uint32_t>(s_.ff));
  }
  void HeadSizeKeys() {
    Key("attention.key_length", static_cast<uint32_t>(hd_));
    Key("attention.value_length", static_cast<uint32_t>(hd_));
  }
  // --ctx is the original context; the file states the stretched one as the released models do
  // (gpt-oss: 32 x 4096 = 131072), which a Hugging Face config's max_position_embeddings must
  // equal for its YaRN factor.
  void Yarn(float factor, float log_multiplier) {
    Key("context_length", static_cast<uint32_t>(std::lround(factor * s_.ctx)));
    KeyS("rope.scaling.type", "yarn");
    KeyF("rope.scaling.factor", factor);
    Key("rope.scaling.original_context_length", static_cast<uint32_t>(s_.ctx));
    KeyF("rope.scaling.yarn_beta_fast", 32.f);
    KeyF("rope.scaling.yarn_beta_slow", 1.f);
    if (log_multiplier > 0) KeyF("rope.scaling.yarn_log_multiplier", log_multiplier);
  }

  void GroupedQueryAttention(int64_t l, bool biases) {
    const int64_t E = s_.embd, q = s_.heads * hd_, kv = s_.kv_heads * hd_;
    AddLayer(l, "attn_q.weight", {q, E}, InScale(E));
    if (biases) AddLayer(l, "attn_q.bias", {q}, 0.1f);
    AddLayer(l, "attn_k.weight", {kv, E}, InScale(E));
    if (biases) AddLayer(l, "attn_k.bias", {kv}, 0.1f);
    AddLayer(l, "attn_v.weight", {kv, E}, InScale(E));
    if (biases) AddLayer(l, "attn_v.bias", {kv}, 0.1f);
    AddLayer(l, "attn_output.weight", {E, q}, 0.5f * InScale(q));
  }
  // Layer l's input norm, grouped-query attention without biases, per-head q and k norm weights
  // and the norm before its feed-forward part (Qwen3's layout, which several families share).
  void NormedAttentionWithQkNorm(int64_t l) {
    Norm(l, "attn_norm.weight", s_.embd);
    GroupedQueryAttention(l, false);
    Norm(l, "attn_q_norm.weight", hd_);
    Norm(l, "attn_k_norm.weight", hd_);
    Norm(l, "ffn_norm.weight", s_.embd);
  }
  void RoutedExperts(int64_t l, bool biases) {
    const int64_t E = s_.embd, X = s_.experts, F = s_.ff;
    AddLayer(l, "ffn_gate_exps.weight", {X, F, E}, InScale(E));
    if (biases) AddLayer(l, "ffn_gate_exps.bias", {X, F}, 0.1f);
    AddLayer(l, "ffn_up_exps.weight", {X, F, E}, InScale(E));
    if (biases) AddLayer(l, "ffn_up_exps.bias", {X, F}, 0.1f);
    AddLayer(l, "ffn_down_exps.weight", {X, E, F}, 0.5f * InScale(F));
    if (biases) AddLayer(l, "ffn_down_exps.bias", {X, E}, 0.1f);
  }
  void Ffn(int64_t l, const char* suffix, int64_t width) {
    const int64_t E = s_.embd;
    AddLayer(l, absl::StrCat("ffn_gate", suffix, ".weight").c_str(), {width, E}, InScale(E));
    AddLayer(l, absl::StrCat("ffn_up", suffix, ".weight").c_str(), {width, E}, InScale(E));
    AddLayer(l, absl::StrCat("ffn_down", suffix, ".weight").c_str(), {E, width},
             0.5f * InScale(width));
  }
  // Leading dense layers or routed experts with an always-on shared expert, and a selection
  // bias when routing is by sigmoid (glm4moe, deepseek2).
  void DenseOrSharedMixture(int64_t l, bool selection_bias) {
    if (l < s_.dense_layers || (l + 1) % s_.moe_layer_step != 0) return Ffn(l, "", DenseFf());
    AddLayer(l, "ffn_gate_inp.weight", {s_.experts, s_.embd}, 2 * InScale(s_.embd));
    if (selection_bias) AddLayer(l, "exp_probs_b.bias", {s_.experts}, 0.1f);
    RoutedExperts(l, false);
    if (s_.shared_experts > 0) Ffn(l, "_shexp", s_.shared_experts * s_.ff);
  }
  int64_t DenseFf() const { return s_.dense_ff > 0 ? s_.dense_ff : 4 * s_.ff; }

  std::vector<Tensor> Take() { return std::move(tensors_); }

 private:
  const Shape& s_;
  GgufWriter& w_;
  const int64_t hd_;
  std::vector<Tensor> tensors_;
};

// llama (Mixtral), qwen2moe, olmoe, qwen3moe, qwen3vlmoe (qwen3moe with multimodal RoPE
// sections), granitemoe (Mixtral's layout with Granite-3.x's multipliers): every layer
// grouped-query attention and experts.
void PlanClassic(const Shape& s, Builder& b) {
  const bool qwen2 = s.arch == "qwen2moe";
  b.CommonKeys(s.layers, qwen2 && s.shared_ff > 0 ? s.shared_ff : s.ff);
  if (s.head_dim > 0) b.HeadSizeKeys();
  if (qwen2 && s.shared_ff > 0) b.Key("expert_shared_feed_forward_length", s.shared_ff);
  if (s.arch == "qwen3vlmoe") {
    // Qwen3-VL's proportions of the rotary pairs ([24, 20, 20, 0] of 64): 5/16 each for height
    // and width, the rest temporal.
    const int32_t pairs = static_cast<int32_t>(b.head_dim() / 2), hw = pairs * 5 / 16;
    b.KeyI32Array("rope.dimension_sections", {pairs - 2 * hw, hw, hw, 0});
  }
  if (s.arch == "granitemoe") {
    // granite-3.0-1b-a400m's multipliers (its attention one is 1 / 64 for head_dim 64).
    b.KeyF("embedding_scale", 12.f);
    b.KeyF("residual_scale", 0.22f);
    b.KeyF("logit_scale", 6.f);
    b.KeyF("attention.scale", 1.f / static_cast<float>(b.head_dim()));
  }
  const int64_t E = s.embd, hd = b.head_dim();
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    b.GroupedQueryAttention(l, false);
    b.Norm(l, "ffn_norm.weight", E);
    b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, E}, 2 * b.InScale(E));
    b.RoutedExperts(l, false);
    if (qwen2) {
      b.AddLayer(l, "attn_q.bias", {s.heads * hd}, 0.1f);
      b.AddLayer(l, "attn_k.bias", {s.kv_heads * hd}, 0.1f);
      b.AddLayer(l, "attn_v.bias", {s.kv_heads * hd}, 0.1f);
      if (s.shared_ff > 0) {
        b.AddLayer(l, "ffn_gate_inp_shexp.weight", {E}, b.InScale(E));
        b.Ffn(l, "_shexp", s.shared_ff);
      }
    }
    if (s.arch == "olmoe" || s.arch == "qwen3moe" || s.arch == "qwen3vlmoe") {
      const bool whole = s.arch == "olmoe";
      b.Norm(l, "attn_q_norm.weight", whole ? s.heads * hd : hd);
      b.Norm(l, "attn_k_norm.weight", whole ? s.kv_heads * hd : hd);
    }
  }
}

// GLM-4.5: partial NEOX RoPE over half of each head, q/k/v biases (with --qk-norm an RMSNorm of
// each q and k head), leading dense layers, sigmoid routing with a selection bias, renormalised
// and scaled by 2.5, one shared expert.
void PlanGlm4Moe(const Shape& s, Builder& b) {
  b.CommonKeys(s.layers, b.DenseFf());
  b.HeadSizeKeys();
  b.Key("rope.dimension_count", static_cast<uint32_t>(b.head_dim() / 2));
  b.Key("leading_dense_block_count", static_cast<uint32_t>(s.dense_layers));
  b.Key("expert_shared_count", static_cast<uint32_t>(s.shared_experts));
  b.Key("expert_gating_func", 2);
  b.Key("expert_group_count", 1);
  b.Key("expert_group_used_count", 1);
  b.KeyF("expert_weights_scale", 2.5f);
  b.KeyB("expert_weights_norm", true);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", s.embd);
    b.GroupedQueryAttention(l, true);
    if (s.qk_norm) {
      b.Norm(l, "attn_q_norm.weight", b.head_dim());
      b.Norm(l, "attn_k_norm.weight", b.head_dim());
    }
    b.Norm(l, "post_attention_norm.weight", s.embd);
    b.DenseOrSharedMixture(l, true);
  }
}

// The group-limited routing's --expert-groups / --expert-groups-used (deepseek2, bailingmoe2).
absl::Status CheckExpertGroups(const Shape& s) {
  if (s.expert_groups < 1 || s.experts % s.expert_groups != 0 ||
      s.expert_groups_used > s.expert_groups) {
    return absl::InvalidArgumentError(
        "--expert-groups must divide --experts and be at least --expert-groups-used");
  }
  return absl::OkStatus();
}

// DeepSeek-V2/V3: latent attention (the cache keeps kv_lora + qk_rope values per token), YaRN
// with DeepSeek's temperature, leading dense layers, shared experts; softmax routing (V2) or
// sigmoid with a selection bias in groups, renormalised and scaled (V3).
absl::Status PlanDeepseek2(const Shape& s, Builder& b) {
  if (s.kv_lora <= 0 || s.qk_nope <= 0 || s.qk_rope <= 0 || s.qk_rope % 2 != 0 || s.v_head <= 0) {
    return absl::InvalidArgumentError(
        "deepseek2 needs --kv-lora, --qk-nope, --v-head > 0 and an even --qk-rope > 0");
  }
  if (absl::Status st = CheckExpertGroups(s); !st.ok()) return st;
  const int64_t E = s.embd, H = s.heads, qk = s.qk_nope + s.qk_rope;
  b.CommonKeys(s.layers, b.DenseFf());
  b.Key("attention.head_count_kv", 1);  // the one latent "KV head" llama.cpp caches
  b.Key("attention.q_lora_rank", static_cast<uint32_t>(s.q_lora));
  b.Key("attention.kv_lora_rank", static_cast<uint32_t>(s.kv_lora));
  b.Key("attention.key_length", static_cast<uint32_t>(s.kv_lora + s.qk_rope));
  b.Key("attention.value_length", static_cast<uint32_t>(s.kv_lora));
  b.Key("attention.key_length_mla", static_cast<uint32_t>(qk));
  b.Key("attention.value_length_mla", static_cast<uint32_t>(s.v_head));
  b.Key("rope.dimension_count", static_cast<uint32_t>(s.qk_rope));
  b.KeyF("rope.freq_base", 10000.f);
  b.Yarn(40.f, 0.1f);
  b.Key("leading_dense_block_count", static_cast<uint32_t>(s.dense_layers));
  b.Key("expert_shared_count", static_cast<uint32_t>(s.shared_experts));
  b.Key("expert_gating_func", s.sigmoid_routing ? 2 : 1);
  b.Key("expert_group_count", static_cast<uint32_t>(s.expert_groups));
  b.Key("expert_group_used_count", static_cast<uint32_t>(s.expert_groups_used));
  b.KeyF("expert_weights_scale", s.sigmoid_routing ? 2.5f : 1.f);
  b.KeyB("expert_weights_norm", s.sigmoid_routing);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    if (s.q_lora > 0) {
      b.AddLayer(l, "attn_q_a.weight", {s.q_lora, E}, b.InScale(E));
      b.Norm(l, "attn_q_a_norm.weight", s.q_lora);
      b.AddLayer(l, "attn_q_b.weight", {H * qk, s.q_lora}, b.InScale(s.q_lora));
    } else {
      b.AddLayer(l, "attn_q.weight", {H * qk, E}, b.InScale(E));
    }
    b.AddLayer(l, "attn_kv_a_mqa.weight", {s.kv_lora + s.qk_rope, E}, b.InScale(E));
    b.Norm(l, "attn_kv_a_norm.weight", s.kv_lora);
    b.AddLayer(l, "attn_k_b.weight", {H, s.kv_lora, s.qk_nope}, b.InScale(s.kv_lora));
    b.AddLayer(l, "attn_v_b.weight", {H, s.v_head, s.kv_lora}, b.InScale(s.kv_lora));
    b.AddLayer(l, "attn_output.weight", {E, H * s.v_head}, 0.5f * b.InScale(H * s.v_head));
    b.Norm(l, "ffn_norm.weight", E);
    b.DenseOrSharedMixture(l, s.sigmoid_routing);
  }
  return absl::OkStatus();
}

// ERNIE-4.5 MoE: llama-style attention (consecutive-pair RoPE, no biases), leading dense layers,
// experts every --moe-layer-step layers after them (dense FFNs between), softmax routing with a
// selection bias, shared experts sized by their whole width.
absl::Status PlanErnie45Moe(const Shape& s, Builder& b) {
  if (s.moe_layer_step < 1 || s.dense_layers < 0) {
    return absl::InvalidArgumentError(
        "--moe-layer-step must be at least 1, --dense-layers 0 or more");
  }
  b.CommonKeys(s.layers, b.DenseFf());
  if (s.head_dim > 0) b.HeadSizeKeys();
  b.Key("interleave_moe_layer_step", static_cast<uint32_t>(s.moe_layer_step));
  b.Key("leading_dense_block_count", static_cast<uint32_t>(s.dense_layers));
  if (s.shared_experts > 0) {
    b.Key("expert_shared_count", static_cast<uint32_t>(s.shared_experts));
    b.Key("expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_experts * s.ff));
  }
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", s.embd);
    b.GroupedQueryAttention(l, false);
    b.Norm(l, "ffn_norm.weight", s.embd);
    b.DenseOrSharedMixture(l, true);
  }
  return absl::OkStatus();
}

// gpt-oss: grouped-query attention with biases and a sink logit per head, a sliding window on
// every other layer, YaRN; a router with a bias; experts with biases and the clamped SwiGLU.
void PlanGptOss(const Shape& s, Builder& b) {
  b.CommonKeys(s.layers, s.ff);
  b.HeadSizeKeys();
  b.KeyF("rope.freq_base", 150000.f);
  b.Yarn(32.f, 0);
  b.Key("attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  const int64_t E = s.embd;
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    b.GroupedQueryAttention(l, true);
    b.AddLayer(l, "attn_output.bias", {E}, 0.1f);
    b.AddLayer(l, "attn_sinks.weight", {s.heads}, 1.0f);
    b.Norm(l, "post_attention_norm.weight", E);
    b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, E}, 2 * b.InScale(E));
    b.AddLayer(l, "ffn_gate_inp.bias", {s.experts}, 0.5f);
    b.RoutedExperts(l, true);
  }
}

// Llama 4: llama-style attention without biases, Llama 3's RoPE divisors, experts every
// --moe-layer-step layers (dense FFNs between, as Maverick's) with a shared expert of their
// width. Chunks, NoPE layers and the sigmoid input-weighted routing are the family's own.
void PlanLlama4(const Shape& s, Builder& b) {
  b.CommonKeys(s.layers, b.DenseFf());
  if (s.head_dim > 0) b.HeadSizeKeys();
  b.Key("interleave_moe_layer_step", static_cast<uint32_t>(s.moe_layer_step));
  const int64_t E = s.embd;
  b.Add("rope_freqs.weight", {b.head_dim() / 2}, 0.5f, 3.0f);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    b.GroupedQueryAttention(l, false);
    b.Norm(l, "ffn_norm.weight", E);
    if ((l + 1) % s.moe_layer_step != 0) {
      b.Ffn(l, "", b.DenseFf());
      continue;
    }
    b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, E}, 2 * b.InScale(E));
    b.RoutedExperts(l, false);
    b.Ffn(l, "_shexp", s.ff);
  }
}

// Ling 2.0 (bailingmoe2): q/k/v as one fused matrix, as llama.cpp's converter writes it, per-head
// QK-norm, partial NEOX RoPE over half of each head, leading dense layers, sigmoid routing with a
// selection bias among the best --expert-groups-used of --expert-groups, renormalised and scaled
// by 2.5, shared experts of --ff each.
absl::Status PlanBailingMoe2(const Shape& s, Builder& b) {
  if (absl::Status st = CheckExpertGroups(s); !st.ok()) return st;
  const int64_t E = s.embd, hd = b.head_dim();
  b.CommonKeys(s.layers, b.DenseFf());
  b.HeadSizeKeys();
  b.Key("rope.dimension_count", static_cast<uint32_t>(hd / 2));
  b.Key("leading_dense_block_count", static_cast<uint32_t>(s.dense_layers));
  b.Key("expert_shared_count", static_cast<uint32_t>(s.shared_experts));
  b.Key("expert_shared_feed_forward_length", static_cast<uint32_t>(s.ff));
  b.Key("expert_gating_func", 2);
  b.Key("expert_group_count", static_cast<uint32_t>(s.expert_groups));
  b.Key("expert_group_used_count", static_cast<uint32_t>(s.expert_groups_used));
  b.KeyF("expert_weights_scale", 2.5f);
  b.KeyB("expert_weights_norm", true);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    b.AddLayer(l, "attn_qkv.weight", {(s.heads + 2 * s.kv_heads) * hd, E}, b.InScale(E));
    b.AddLayer(l, "attn_output.weight", {E, s.heads * hd}, 0.5f * b.InScale(s.heads * hd));
    b.Norm(l, "attn_q_norm.weight", hd);
    b.Norm(l, "attn_k_norm.weight", hd);
    b.Norm(l, "ffn_norm.weight", E);
    b.DenseOrSharedMixture(l, true);
  }
  return absl::OkStatus();
}

// MiniMax-M2: grouped-query attention with an RMSNorm over the whole q and k projections, NEOX
// RoPE over half of each head, then in every layer sigmoid routing with a selection bias,
// renormalised, no shared expert.
void PlanMinimaxM2(const Shape& s, Builder& b) {
  const int64_t E = s.embd, hd = b.head_dim();
  b.CommonKeys(s.layers, s.ff);
  b.HeadSizeKeys();
  b.Key("rope.dimension_count", static_cast<uint32_t>(hd / 2));
  b.Key("expert_gating_func", 2);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    b.GroupedQueryAttention(l, false);
    b.Norm(l, "attn_q_norm.weight", s.heads * hd);
    b.Norm(l, "attn_k_norm.weight", s.kv_heads * hd);
    b.Norm(l, "ffn_norm.weight", E);
    b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, E}, 2 * b.InScale(E));
    b.AddLayer(l, "exp_probs_b.bias", {s.experts}, 0.1f);
    b.RoutedExperts(l, false);
  }
}

// dots.llm1: Qwen3's attention (per-head QK-norm, NEOX RoPE), leading dense layers, sigmoid
// routing with a selection bias, renormalised and scaled by 2.5, shared experts of --ff each.
void PlanDots1(const Shape& s, Builder& b) {
  b.CommonKeys(s.layers, b.DenseFf());
  b.HeadSizeKeys();
  b.Key("leading_dense_block_count", static_cast<uint32_t>(s.dense_layers));
  b.Key("expert_shared_count", static_cast<uint32_t>(s.shared_experts));
  b.Key("expert_gating_func", 2);
  b.KeyF("expert_weights_scale", 2.5f);
  b.KeyB("expert_weights_norm", true);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.NormedAttentionWithQkNorm(l);
    b.DenseOrSharedMixture(l, true);
  }
}

// LFM2-MoE: gated short-convolution layers with grouped-query attention layers among them
// (head_count_kv 0 marks a convolution layer), Qwen3's QK-norm, leading dense layers, sigmoid
// routing with a selection bias, renormalised; no shared expert.
// A hybrid's attention layers (--attention-layers, default every fourth from the third),
// written as the head_count_kv array whose 0 entries mark the other layers.
absl::StatusOr<std::vector<bool>> HybridAttentionLayers(const Shape& s, Builder& b) {
  std::vector<bool> attends(s.layers, false);
  if (s.attention_layers.empty()) {
    for (int64_t l = 2; l < s.layers; l += 4) attends[l] = true;
  }
  for (int64_t l : s.attention_layers) {
    if (l < 0 || l >= s.layers) {
      return absl::InvalidArgumentError(absl::StrCat("--attention-layers: no layer ", l));
    }
    attends[l] = true;
  }
  std::vector<int32_t> kv_heads;
  for (int64_t l = 0; l < s.layers; ++l) {
    kv_heads.push_back(attends[l] ? static_cast<int32_t>(s.kv_heads) : 0);
  }
  b.KeyI32Array("attention.head_count_kv", std::move(kv_heads));
  return attends;
}

absl::Status PlanLfm2Moe(const Shape& s, Builder& b) {
  // llama.cpp's LFM2 reads q and the output projection as [embd x embd]: no other head size.
  if (b.head_dim() * s.heads != s.embd) {
    return absl::InvalidArgumentError("lfm2moe's heads span the embedding: drop --head-dim");
  }
  const int64_t kernel = s.conv_kernel > 0 ? s.conv_kernel : 3;
  if (kernel < 2) return absl::InvalidArgumentError("--conv-kernel must be at least 2");
  b.CommonKeys(s.layers, b.DenseFf());
  absl::StatusOr<std::vector<bool>> attends = HybridAttentionLayers(s, b);
  if (!attends.ok()) return attends.status();
  b.Key("shortconv.l_cache", static_cast<uint32_t>(kernel));
  b.Key("leading_dense_block_count", static_cast<uint32_t>(s.dense_layers));
  b.Key("expert_gating_func", 2);
  const int64_t E = s.embd;
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "ffn_norm.weight", E);
    if (l < s.dense_layers) {
      b.Ffn(l, "", b.DenseFf());
    } else {
      b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, E}, 2 * b.InScale(E));
      b.RoutedExperts(l, false);
      b.AddLayer(l, "exp_probs_b.bias", {s.experts}, 0.1f);
    }
    b.Norm(l, "attn_norm.weight", E);
    if ((*attends)[l]) {
      b.Norm(l, "attn_q_norm.weight", b.head_dim());
      b.Norm(l, "attn_k_norm.weight", b.head_dim());
      b.GroupedQueryAttention(l, false);
    } else {
      b.AddLayer(l, "shortconv.conv.weight", {E, kernel},
                 1.0f / std::sqrt(static_cast<float>(kernel)));
      b.AddLayer(l, "shortconv.in_proj.weight", {3 * E, E}, b.InScale(E));
      b.AddLayer(l, "shortconv.out_proj.weight", {E, E}, 0.5f * b.InScale(E));
    }
  }
  return absl::OkStatus();
}

// Hunyuan-A13B: llama-layout attention with a weighted per-head RMSNorm of q and k after NEOX
// RoPE, every layer softmax routing renormalised beside a shared expert of --shared-ff (the
// experts --ff wide, written as feed_forward_length, which llama.cpp's graph reads for them).
void PlanHunyuanMoe(const Shape& s, Builder& b) {
  b.CommonKeys(s.layers, s.ff);
  b.HeadSizeKeys();
  b.Key("expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_ff));
  b.Key("expert_shared_count", 1);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.NormedAttentionWithQkNorm(l);
    b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, s.embd}, 2 * b.InScale(s.embd));
    b.RoutedExperts(l, false);
    b.Ffn(l, "_shexp", s.shared_ff);
  }
}

// DeepSeek-MoE (deepseek): llama's attention (q as wide as the embedding), leading dense layers,
// softmax routing unnormalised and unscaled, --shared-experts shared experts of --ff each.
absl::Status PlanDeepseek(const Shape& s, Builder& b) {
  if (b.head_dim() * s.heads != s.embd) {
    return absl::InvalidArgumentError("deepseek's heads span the embedding: drop --head-dim");
  }
  b.CommonKeys(s.layers, b.DenseFf());
  b.Key("leading_dense_block_count", static_cast<uint32_t>(s.dense_layers));
  b.Key("expert_shared_count", static_cast<uint32_t>(s.shared_experts));
  b.KeyF("expert_weights_scale", 1.f);
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", s.embd);
    b.GroupedQueryAttention(l, false);
    b.Norm(l, "ffn_norm.weight", s.embd);
    b.DenseOrSharedMixture(l, false);
  }
  return absl::OkStatus();
}

// Mamba-2's sizes (inner size 2 x embd, as llama.cpp requires) and their ssm.* keys.
struct Mamba2Sizes {
  int64_t kernel, inner, groups, state, heads, channels;
};
absl::StatusOr<Mamba2Sizes> Mamba2Keys(const Shape& s, Builder& b) {
  const int64_t kernel = s.conv_kernel > 0 ? s.conv_kernel : 4;
  const int64_t inner = 2 * s.embd, G = s.ssm_groups, N = s.ssm_state;
  if (kernel < 2) return absl::InvalidArgumentError("--conv-kernel must be at least 2");
  if (s.ssm_head_dim <= 0 || inner % s.ssm_head_dim != 0 || N <= 0 || G <= 0 ||
      (inner / s.ssm_head_dim) % G != 0) {
    return absl::InvalidArgumentError(
        "--ssm-head-dim must divide 2 x --embd into heads that --ssm-groups divides");
  }
  const Mamba2Sizes m{kernel, inner, G, N, inner / s.ssm_head_dim, inner + 2 * G * N};
  b.Key("ssm.conv_kernel", static_cast<uint32_t>(m.kernel));
  b.Key("ssm.inner_size", static_cast<uint32_t>(m.inner));
  b.Key("ssm.state_size", static_cast<uint32_t>(m.state));
  b.Key("ssm.time_step_rank", static_cast<uint32_t>(m.heads));
  b.Key("ssm.group_count", static_cast<uint32_t>(m.groups));
  return m;
}

// A Mamba-2 mixer's tensors in layer l.
void Mamba2Mixer(int64_t l, const Mamba2Sizes& m, int64_t E, Builder& b) {
  const int64_t H = m.heads, G = m.groups;
  b.AddLayer(l, "ssm_in.weight", {m.inner + m.channels + H, E}, b.InScale(E));
  b.AddLayer(l, "ssm_conv1d.weight", {m.channels, m.kernel},
             1.0f / std::sqrt(static_cast<float>(m.kernel)));
  b.AddLayer(l, "ssm_conv1d.bias", {m.channels}, 0.1f);
  // dt's bias near softplus^-1(0.1), A = -e^(A_log) with A_log about 1, D about 1: the
  // ranges Mamba-2 initialises them in.
  b.AddLayer(l, "ssm_dt.bias", {H}, 0.5f, -2.f);
  b.AddLayer(l, "ssm_a", {H, 1}, 0.5f, -3.f);
  b.AddLayer(l, "ssm_d", {H, 1}, 0.1f, 1.f);
  b.AddLayer(l, "ssm_norm.weight", {G, m.inner / G}, 0.05f, 1.f);
  b.AddLayer(l, "ssm_out.weight", {E, m.inner}, 0.5f * b.InScale(m.inner));
}

// Granite-4.0-H: Mamba-2 layers with grouped-query attention layers among them (head_count_kv
// 0 marks a Mamba-2 layer; no RoPE, as the released checkpoints), Granite-4.0-H-Tiny's
// multipliers, in every layer softmax routing renormalised beside a shared expert of --ff.
absl::Status PlanGraniteHybrid(const Shape& s, Builder& b) {
  const int64_t E = s.embd;
  b.CommonKeys(s.layers, s.ff);
  absl::StatusOr<std::vector<bool>> attends = HybridAttentionLayers(s, b);
  if (!attends.ok()) return attends.status();
  absl::StatusOr<Mamba2Sizes> mamba = Mamba2Keys(s, b);
  if (!mamba.ok()) return mamba.status();
  if (s.head_dim > 0) b.HeadSizeKeys();
  b.KeyB("rope.scaling.finetuned", false);
  b.KeyF("embedding_scale", 12.f);
  b.KeyF("residual_scale", 0.22f);
  b.KeyF("logit_scale", 6.f);
  b.KeyF("attention.scale", 1.f / static_cast<float>(b.head_dim()));
  b.Key("expert_shared_feed_forward_length", static_cast<uint32_t>(s.ff));
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    if ((*attends)[l]) {
      b.GroupedQueryAttention(l, false);
    } else {
      Mamba2Mixer(l, *mamba, E, b);
    }
    b.Norm(l, "ffn_norm.weight", E);
    b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, E}, 2 * b.InScale(E));
    b.RoutedExperts(l, false);
    b.Ffn(l, "_shexp", s.ff);
  }
  return absl::OkStatus();
}

// Nemotron-H MoE: each layer one part after its attn_norm, as --layer-pattern spells them (M a
// Mamba-2 mixer, * attention without RoPE, E ungated relu^2 experts beside a shared expert of
// --shared-ff; default: Nemotron-3-Nano's pattern, cut to --layers), with --moe-latent the
// routed experts in a latent space (Nemotron 3 Super); sigmoid routing with a selection bias,
// renormalised and scaled by 2.5, as Nemotron-3-Nano's config.
absl::Status PlanNemotronHMoe(const Shape& s, Builder& b) {
  static constexpr char kNanoPattern[] = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
  std::string pattern = s.layer_pattern;
  if (pattern.empty()) {
    for (int64_t l = 0; l < s.layers; ++l) pattern += kNanoPattern[l % (sizeof(kNanoPattern) - 1)];
  }
  if (static_cast<int64_t>(pattern.size()) != s.layers ||
      pattern.find_first_not_of("ME*") != std::string::npos ||
      pattern.find('M') == std::string::npos || pattern.find('E') == std::string::npos) {
    return absl::InvalidArgumentError(
        "--layer-pattern: one of M (Mamba-2), * (attention), E (experts) per layer, with at "
        "least one M and one E");
  }
  const int64_t E = s.embd;
  b.CommonKeys(s.layers, s.ff);
  std::vector<int32_t> kv_heads, ff;
  for (char c : pattern) {
    kv_heads.push_back(c == '*' ? static_cast<int32_t>(s.kv_heads) : 0);
    ff.push_back(c == 'E' ? static_cast<int32_t>(s.ff) : 0);
  }
  b.KeyI32Array("attention.head_count_kv", std::move(kv_heads));
  b.KeyI32Array("feed_forward_length", std::move(ff));
  b.HeadSizeKeys();
  absl::StatusOr<Mamba2Sizes> mamba = Mamba2Keys(s, b);
  if (!mamba.ok()) return mamba.status();
  b.KeyB("rope.scaling.finetuned", false);
  b.Key("expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_ff));
  b.Key("expert_shared_count", 1);
  b.Key("expert_group_count", 1);
  b.KeyF("expert_weights_scale", 2.5f);
  b.KeyB("expert_weights_norm", true);
  if (s.moe_latent > 0) b.Key("moe_latent_size", static_cast<uint32_t>(s.moe_latent));
  const int64_t L = s.moe_latent > 0 ? s.moe_latent : E;  // the routed experts' rows
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    if (pattern[l] == 'M') {
      Mamba2Mixer(l, *mamba, E, b);
    } else if (pattern[l] == '*') {
      b.GroupedQueryAttention(l, false);
    } else {
      const int64_t X = s.experts, F = s.ff, S = s.shared_ff;
      b.AddLayer(l, "ffn_gate_inp.weight", {X, E}, 2 * b.InScale(E));
      b.AddLayer(l, "exp_probs_b.bias", {X}, 0.1f);
      if (s.moe_latent > 0) {
        b.AddLayer(l, "ffn_latent_down.weight", {L, E}, b.InScale(E));
        b.AddLayer(l, "ffn_latent_up.weight", {E, L}, b.InScale(L));
      }
      b.AddLayer(l, "ffn_up_exps.weight", {X, F, L}, 2 * b.InScale(L));
      b.AddLayer(l, "ffn_down_exps.weight", {X, L, F}, 0.5f * b.InScale(F));
      b.AddLayer(l, "ffn_up_shexp.weight", {S, E}, 2 * b.InScale(E));
      b.AddLayer(l, "ffn_down_shexp.weight", {E, S}, 0.5f * b.InScale(S));
    }
  }
  return absl::OkStatus();
}

// Qwen3.5-MoE: gated delta nets of --ssm-heads value heads over --ssm-groups key heads, each
// --ssm-state wide, and every --full-attention-interval-th layer gated attention (attn_q twice
// as tall: each head's q, then its gate) with per-head QK-norm and interleaved multimodal RoPE
// over a quarter of each head (Qwen3.5's partial_rotary_factor, sections in its 11:11:10
// proportions); every layer softmax routing renormalised beside a shared expert of --shared-ff
// scaled by sigmoid(w . x). qwen3next (Qwen3-Next): plain partial NEOX RoPE over a quarter of
// each head, and beta and alpha in one ssm_ba matrix.
absl::Status PlanQwenDeltaNetHybrid(const Shape& s, Builder& b) {
  const bool next = s.arch == "qwen3next";
  const int64_t E = s.embd, hd = b.head_dim(), K = s.conv_kernel > 0 ? s.conv_kernel : 4;
  const int64_t S = s.ssm_state, HK = s.ssm_groups, HV = s.ssm_heads > 0 ? s.ssm_heads : 2 * HK;
  const int64_t I = HV * S, C = 2 * HK * S + I;
  if (S <= 0 || HK <= 0 || HV % HK != 0 || K < 2 || s.full_attention_interval < 1 || hd % 4 != 0) {
    return absl::InvalidArgumentError(
        "qwen35moe, qwen3next: --ssm-heads must be a multiple of --ssm-groups, --conv-kernel at "
        "least 2, "
        "--full-attention-interval at least 1, the head size a multiple of 4");
  }
  b.CommonKeys(s.layers, s.ff);
  b.HeadSizeKeys();
  const int64_t rope = hd / 4, pairs = rope / 2, t = (pairs + 2) / 3, h = (pairs - t + 1) / 2;
  b.Key("rope.dimension_count", static_cast<uint32_t>(rope));
  if (!next) {
    b.KeyI32Array("rope.dimension_sections", {static_cast<int32_t>(t), static_cast<int32_t>(h),
                                              static_cast<int32_t>(pairs - t - h), 0});
  }
  b.Key("expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_ff));
  b.Key("ssm.conv_kernel", static_cast<uint32_t>(K));
  b.Key("ssm.inner_size", static_cast<uint32_t>(I));
  b.Key("ssm.state_size", static_cast<uint32_t>(S));
  b.Key("ssm.time_step_rank", static_cast<uint32_t>(HV));
  b.Key("ssm.group_count", static_cast<uint32_t>(HK));
  b.Key("full_attention_interval", static_cast<uint32_t>(s.full_attention_interval));
  const int64_t q = s.heads * hd;
  for (int64_t l = 0; l < s.layers; ++l) {
    b.Norm(l, "attn_norm.weight", E);
    if ((l + 1) % s.full_attention_interval == 0) {
      b.AddLayer(l, "attn_q.weight", {2 * q, E}, b.InScale(E));
      b.AddLayer(l, "attn_k.weight", {s.kv_heads * hd, E}, b.InScale(E));
      b.AddLayer(l, "attn_v.weight", {s.kv_heads * hd, E}, b.InScale(E));
      b.AddLayer(l, "attn_output.weight", {E, q}, 0.5f * b.InScale(q));
      b.Norm(l, "attn_q_norm.weight", hd);
      b.Norm(l, "attn_k_norm.weight", hd);
    } else {
      b.AddLayer(l, "attn_qkv.weight", {C, E}, b.InScale(E));
      b.AddLayer(l, "attn_gate.weight", {I, E}, b.InScale(E));
      b.AddLayer(l, "ssm_conv1d.weight", {C, K}, 1.0f / std::sqrt(static_cast<float>(K)));
      // softplus(alpha + dt_bias) about 0.1 and A about -0.5: a state that carries far.
      b.AddLayer(l, "ssm_dt.bias", {HV}, 0.5f, -2.f);
      b.AddLayer(l, "ssm_a", {HV}, 0.1f, -0.5f);
      if (next) {
        b.AddLayer(l, "ssm_ba.weight", {2 * HV, E}, b.InScale(E));
      } else {
        b.AddLayer(l, "ssm_beta.weight", {HV, E}, b.InScale(E));
        b.AddLayer(l, "ssm_alpha.weight", {HV, E}, b.InScale(E));
      }
      b.Norm(l, "ssm_norm.weight", S);
      b.AddLayer(l, "ssm_out.weight", {E, I}, 0.5f * b.InScale(I));
    }
    b.Norm(l, "post_attention_norm.weight", E);
    b.AddLayer(l, "ffn_gate_inp.weight", {s.experts, E}, 2 * b.InScale(E));
    b.RoutedExperts(l, false);
    b.AddLayer(l, "ffn_gate_inp_shexp.weight", {E}, b.InScale(E));
    b.Ffn(l, "_shexp", s.shared_ff);
  }
  return absl::OkStatus();
}

}  // namespace

std::string OutputNormName(const Shape& s) {
  return s.arch == "lfm2moe" ? "token_embd_norm.weight" : "output_norm.weight";
}

const std::vector<std::string>& Architectures() {
  static const std::vector<std::string> kNames = {
      "llama",          "qwen2moe",   "olmoe",        "qwen3moe",    "glm4moe",       "deepseek2",
      "gpt-oss",        "qwen3vlmoe", "ernie4_5-moe", "granitemoe",  "llama4",        "bailingmoe2",
      "minimax-m2",     "dots1",      "lfm2moe",      "hunyuan-moe", "granitehybrid", "deepseek",
      "nemotron_h_moe", "qwen35moe",  "qwen3next"};
  return kNames;
}

absl::StatusOr<std::vector<Tensor>> Plan(const Shape& s, GgufWriter& w) {
  if (s.embd <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.experts <= 0 ||
      s.top_k <= 0 || s.top_k > s.experts || s.ff <= 0 || s.head_dim < 0) {
    return absl::InvalidArgumentError("sizes must be positive, and --top-k at most --experts");
  }
  if (s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError("--heads must be a multiple of --kv-heads");
  }
  if (s.head_dim == 0 && s.embd % s.heads != 0) {
    return absl::InvalidArgumentError("--embd must be a multiple of --heads (or give --head-dim)");
  }
  if (s.moe_layer_step != 1 && s.arch != "ernie4_5-moe" && s.arch != "llama4") {
    return absl::InvalidArgumentError("--moe-layer-step is ernie4_5-moe's and llama4's");
  }
  if (s.moe_layer_step < 1) return absl::InvalidArgumentError("--moe-layer-step must be >= 1");
  Builder b(s, w);
  if (s.arch == "glm4moe") {
    PlanGlm4Moe(s, b);
  } else if (s.arch == "deepseek2") {
    if (absl::Status st = PlanDeepseek2(s, b); !st.ok()) return st;
  } else if (s.arch == "gpt-oss") {
    PlanGptOss(s, b);
  } else if (s.arch == "ernie4_5-moe") {
    if (absl::Status st = PlanErnie45Moe(s, b); !st.ok()) return st;
  } else if (s.arch == "llama4") {
    PlanLlama4(s, b);
  } else if (s.arch == "bailingmoe2") {
    if (absl::Status st = PlanBailingMoe2(s, b); !st.ok()) return st;
  } else if (s.arch == "minimax-m2") {
    PlanMinimaxM2(s, b);
  } else if (s.arch == "dots1") {
    PlanDots1(s, b);
  } else if (s.arch == "hunyuan-moe") {
    PlanHunyuanMoe(s, b);
  } else if (s.arch == "lfm2moe") {
    if (absl::Status st = PlanLfm2Moe(s, b); !st.ok()) return st;
  } else if (s.arch == "granitehybrid") {
    if (absl::Status st = PlanGraniteHybrid(s, b); !st.ok()) return st;
  } else if (s.arch == "deepseek") {
    if (absl::Status st = PlanDeepseek(s, b); !st.ok()) return st;
  } else if (s.arch == "nemotron_h_moe") {
    if (absl::Status st = PlanNemotronHMoe(s, b); !st.ok()) return st;
  } else if (s.arch == "qwen35moe" || s.arch == "qwen3next") {
    if (absl::Status st = PlanQwenDeltaNetHybrid(s, b); !st.ok()) return st;
  } else {
    PlanClassic(s, b);
  }
  return b.Take();
}

}  // namespace moe::synth
