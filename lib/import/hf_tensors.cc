#include "lib/import/hf_tensors.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/model/arch/architecture.h"

namespace moe {
namespace {

using Shape = std::vector<int64_t>;

// Appends wanted tensors; `prefix` is the layer's "model.layers.L.".
class Wants {
 public:
  explicit Wants(std::vector<WantedTensor>* out) : out_(out) {}

  WantedTensor& Add(std::string hf, std::string name, Shape shape, int layer = -1,
                    int expert = -1) {
    WantedTensor w;
    w.hf_name = std::move(hf);
    w.name = std::move(name);
    w.hf_shape = shape;
    w.shape = std::move(shape);
    w.layer = layer;
    w.expert = expert;
    out_->push_back(std::move(w));
    return out_->back();
  }
  // A norm weight, bias or other vector: F32 whatever type is asked for.
  WantedTensor& Vector(std::string hf, std::string name, Shape shape, int layer = -1) {
    WantedTensor& w = Add(std::move(hf), std::move(name), std::move(shape), layer);
    w.keep_f32 = true;
    return w;
  }

 private:
  std::vector<WantedTensor>* out_;
};

std::string Bias(int layer, absl::string_view base) {
  return absl::StrCat("blk.", layer, ".", base, ".bias");
}

// A norm weight stored as w where the model scales by 1 + w (Qwen3NextRMSNorm), read as 1 + w.
float OneMore(float w) { return w + 1.f; }

// The embeddings, the final norm (under the name the family's runtime reads; its values through
// `final_norm_value` where set) and the head.
void AddEmbeddings(const HfConfig& c, Wants& w, std::string embeddings, std::string final_norm,
                   std::function<float(float)> final_norm_value = nullptr) {
  const HParams& h = c.hp;
  w.Add(std::move(embeddings), "token_embd.weight", {h.n_vocab, h.n_embd});
  w.Vector(std::move(final_norm), std::string(ArchitectureOf(c.arch).output_norm()), {h.n_embd})
      .value = std::move(final_norm_value);
  if (!h.tied_output) w.Add("lm_head.weight", "output.weight", {h.n_vocab, h.n_embd});
}
// Under the language model's prefix (HfConfig::model_prefix).
void AddEmbeddings(const HfConfig& c, Wants& w,
                   std::function<float(float)> final_norm_value = nullptr) {
  AddEmbeddings(c, w, c.model_prefix + "embed_tokens.weight", c.model_prefix + "norm.weight",
                std::move(final_norm_value));
}

// The input norm and grouped-query attention, with q/k/v biases where the family has them
// (Qwen2-MoE, GLM-4.5, gpt-oss).
void InputNormAndAttention(const HParams& h, int l, const std::string& p, Wants& w) {
  const int64_t d = h.n_embd, q_dim = h.n_head * h.head_dim, kv_dim = h.n_head_kv * h.head_dim;
  auto name = [&](const char* base) { return LayerTensorName(l, base); };
  w.Vector(p + "input_layernorm.weight", name("attn_norm"), {d}, l);
  w.Add(p + "self_attn.q_proj.weight", name("attn_q"), {q_dim, d}, l);
  w.Add(p + "self_attn.k_proj.weight", name("attn_k"), {kv_dim, d}, l);
  w.Add(p + "self_attn.v_proj.weight", name("attn_v"), {kv_dim, d}, l);
  w.Add(p + "self_attn.o_proj.weight", name("attn_output"), {d, q_dim}, l);
  if (h.has_qkv_bias) {
    w.Vector(p + "self_attn.q_proj.bias", Bias(l, "attn_q"), {q_dim}, l);
    w.Vector(p + "self_attn.k_proj.bias", Bias(l, "attn_k"), {kv_dim}, l);
    w.Vector(p + "self_attn.v_proj.bias", Bias(l, "attn_v"), {kv_dim}, l);
  }
}

// Expert e of layer l as its own gate_proj, up_proj and down_proj under `x`.
void AddExpert(const HParams& h, int l, int e, const std::string& x, Wants& w) {
  const int64_t d = h.n_embd, ff = h.n_ff_expert;
  w.Add(x + "gate_proj.weight", ExpertTensorName(l, e, "ffn_gate"), {ff, d}, l, e);
  w.Add(x + "up_proj.weight", ExpertTensorName(l, e, "ffn_up"), {ff, d}, l, e);
  w.Add(x + "down_proj.weight", ExpertTensorName(l, e, "ffn_down"), {d, ff}, l, e);
}

// A SwiGLU MLP `width` wide under `prefix` (its gate_proj, up_proj, down_proj) as layer l's
// ffn_gate, ffn_up and ffn_down with `suffix` ("" for a dense FFN, "_shexp" for shared experts).
void AddMlp(const HParams& h, int l, const std::string& prefix, absl::string_view suffix,
            int64_t width, Wants& w) {
  auto name = [&](const char* base) { return LayerTensorName(l, absl::StrCat(base, suffix)); };
  w.Add(prefix + "gate_proj.weight", name("ffn_gate"), {width, h.n_embd}, l);
  w.Add(prefix + "up_proj.weight", name("ffn_up"), {width, h.n_embd}, l);
  w.Add(prefix + "down_proj.weight", name("ffn_down"), {h.n_embd, width}, l);
}

// Layer l's input norm, attention and post-attention norm (as ffn_norm), llama's layout; returns
// the layer's name prefix.
std::string LlamaLayerNormsAndAttention(const HParams& h, int l, Wants& w) {
  const std::string p = absl::StrCat("model.layers.", l, ".");
  InputNormAndAttention(h, l, p, w);
  w.Vector(p + "post_attention_layernorm.weight", LayerTensorName(l, "ffn_norm"), {h.n_embd}, l);
  return p;
}

// Mixtral, Qwen2-MoE, OLMoE, Qwen3-MoE, and MiniMax-M2 (Mixtral's names with a QK-norm over the
// whole projections and the router's e_score_correction_bias): every layer a mixture of
// per-expert tensors.
void ClassicFamilies(const HfConfig& c, Wants& w) {
  const HParams& h = c.hp;
  const int64_t d = h.n_embd, q_dim = h.n_head * h.head_dim, kv_dim = h.n_head_kv * h.head_dim;
  const bool mixtral = c.arch == Arch::kLlama || c.arch == Arch::kMinimaxM2;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    InputNormAndAttention(h, l, p, w);
    if (h.qk_norm != QkNorm::kNone) {
      const bool full = h.qk_norm == QkNorm::kFull;  // OLMoE: whole projection; Qwen3: per head
      w.Vector(p + "self_attn.q_norm.weight", name("attn_q_norm"), {full ? q_dim : h.head_dim}, l);
      w.Vector(p + "self_attn.k_norm.weight", name("attn_k_norm"), {full ? kv_dim : h.head_dim}, l);
    }
    w.Vector(p + "post_attention_layernorm.weight", name("ffn_norm"), {d}, l);
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    w.Add(moe + "gate.weight", name("ffn_gate_inp"), {h.n_expert, d}, l).router = true;
    if (h.has_selection_bias) {
      w.Vector(moe + "e_score_correction_bias", Bias(l, "exp_probs_b"), {h.n_expert}, l);
    }
    for (int e = 0; e < h.n_expert; ++e) {
      const std::string x = absl::StrCat(moe, "experts.", e, ".");
      // Mixtral's MixtralBlockSparseTop2MLP: w1 = gate, w3 = up, w2 = down.
      w.Add(x + (mixtral ? "w1.weight" : "gate_proj.weight"), ExpertTensorName(l, e, "ffn_gate"),
            {h.n_ff_expert, d}, l, e);
      w.Add(x + (mixtral ? "w3.weight" : "up_proj.weight"), ExpertTensorName(l, e, "ffn_up"),
            {h.n_ff_expert, d}, l, e);
      w.Add(x + (mixtral ? "w2.weight" : "down_proj.weight"), ExpertTensorName(l, e, "ffn_down"),
            {d, h.n_ff_expert}, l, e);
    }
    if (h.n_ff_shared > 0) {
      AddMlp(h, l, moe + "shared_expert.", "_shexp", h.n_ff_shared, w);
      if (h.shared_expert_gate) {
        // A [1, n_embd] Linear stored as the vector it is.
        w.Vector(moe + "shared_expert_gate.weight", name("ffn_gate_inp_shexp"), {d}, l).hf_shape = {
            1, d};
      }
    }
  }
}

// GLM-4.5, DeepSeek and ERNIE-4.5: a dense MLP in the layers without experts (the first
// n_layer_dense; ERNIE's between its expert layers too), the others per-expert tensors, a router
// with an optional selection bias (`selection_bias`: its name) and the shared experts as one MLP.
struct SelectionBiasName {
  absl::string_view hf = "mlp.gate.e_score_correction_bias";
  bool one_row_table = false;  // stored [1, n_expert]
};
void AddFeedForward(const HParams& h, int l, const std::string& p, Wants& w,
                    SelectionBiasName selection_bias = {}) {
  const int64_t d = h.n_embd;
  auto name = [&](const char* base) { return LayerTensorName(l, base); };
  if (!h.layer_has_experts(l)) {
    AddMlp(h, l, p + "mlp.", "", h.n_ff_dense, w);
    return;
  }
  w.Add(p + "mlp.gate.weight", name("ffn_gate_inp"), {h.n_expert, d}, l).router = true;
  if (h.has_selection_bias) {
    WantedTensor& b =
        w.Vector(absl::StrCat(p, selection_bias.hf), Bias(l, "exp_probs_b"), {h.n_expert}, l);
    if (selection_bias.one_row_table) b.hf_shape = {1, h.n_expert};
  }
  for (int e = 0; e < h.n_expert; ++e)
    AddExpert(h, l, e, absl::StrCat(p, "mlp.experts.", e, "."), w);
  if (h.n_ff_shared > 0) AddMlp(h, l, p + "mlp.shared_experts.", "_shexp", h.n_ff_shared, w);
}

// DeepseekForCausalLM (DeepSeek-MoE): llama's attention, DeepSeek's feed-forward layout.
void Deepseek(const HParams& h, Wants& w) {
  for (int l = 0; l < h.n_layer; ++l) AddFeedForward(h, l, LlamaLayerNormsAndAttention(h, l, w), w);
}

// Glm4MoeForCausalLM. The MTP layers after num_hidden_layers are in the checkpoint but not wanted.
void Glm4Moe(const HParams& h, Wants& w) {
  const int64_t d = h.n_embd;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    InputNormAndAttention(h, l, p, w);
    if (h.qk_norm == QkNorm::kPerHead) {
      w.Vector(p + "self_attn.q_norm.weight", name("attn_q_norm"), {h.head_dim}, l);
      w.Vector(p + "self_attn.k_norm.weight", name("attn_k_norm"), {h.head_dim}, l);
    }
    w.Vector(p + "post_attention_layernorm.weight", name("post_attention_norm"), {d}, l);
    AddFeedForward(h, l, p, w);
  }
}

// Ernie4_5_MoeForCausalLM: llama's attention without biases; the selection bias is
// moe_statics.e_score_correction_bias, one row of a [1, n_expert] table.
void Ernie45Moe(const HParams& h, Wants& w) {
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = LlamaLayerNormsAndAttention(h, l, w);
    AddFeedForward(h, l, p, w, {"mlp.moe_statics.e_score_correction_bias", true});
  }
}

// t's element (r, c) is the checkpoint tensor's element first + r * row_stride + c * col_stride.
void Transposed(int64_t first, int64_t row_stride, int64_t col_stride, WantedTensor& t) {
  t.first_element = first;
  t.row_stride = row_stride;
  t.col_stride = col_stride;
}

// Expert e of layer l from stacks laid out as the runtime's rows (Granite's input_linear /
// output_linear, Qwen3.5's experts.gate_up_proj / down_proj): `gate_up` [n_expert, 2 ff, n_embd]
// holds each expert's gate rows, then its up rows, `down` [n_expert, n_embd, ff] its down rows;
// each of the expert's matrices is a slice of its stack (zero copy where the type stays).
void SlicedStackedExpert(const HParams& h, int l, int e, const std::string& gate_up,
                         const std::string& down, Wants& w) {
  const int64_t d = h.n_embd, n = h.n_expert, ff = h.n_ff_expert;
  for (int half = 0; half < 2; ++half) {  // 0: gate, 1: up
    WantedTensor& t =
        w.Add(gate_up, ExpertTensorName(l, e, half == 0 ? "ffn_gate" : "ffn_up"), {ff, d}, l, e);
    t.hf_shape = {n, 2 * ff, d};
    t.first_element = (e * 2 + half) * ff * d;
  }
  WantedTensor& t = w.Add(down, ExpertTensorName(l, e, "ffn_down"), {d, ff}, l, e);
  t.hf_shape = {n, d, ff};
  t.first_element = e * d * ff;
}

// Expert e of layer l from experts stacked under `x` transposed against the runtime's rows
// (Llama 4, Qwen3-VL-MoE): x + gate_up_proj [n_expert, n_embd, 2 ff] (inputs first; the gate's ff
// columns, then the up's) and x + down_proj [n_expert, ff, n_embd].
void TransposedStackedExpert(const HParams& h, int l, int e, const std::string& x, Wants& w) {
  const int64_t d = h.n_embd, n = h.n_expert, ff = h.n_ff_expert;
  for (int half = 0; half < 2; ++half) {  // 0: gate, 1: up
    WantedTensor& t =
        w.Add(x + "gate_up_proj", ExpertTensorName(l, e, half == 0 ? "ffn_gate" : "ffn_up"),
              {ff, d}, l, e);
    t.hf_shape = {n, d, 2 * ff};
    Transposed(e * d * 2 * ff + half * ff, 1, 2 * ff, t);
  }
  WantedTensor& t = w.Add(x + "down_proj", ExpertTensorName(l, e, "ffn_down"), {d, ff}, l, e);
  t.hf_shape = {n, ff, d};
  Transposed(e * ff * d, 1, d, t);
}

// Granite's feed-forward part of layer l under `p`: the experts stacked as
// block_sparse_moe.input_linear [n_expert, 2 ff, n_embd] (each expert's gate rows, then its up
// rows) and output_linear [n_expert, n_embd, ff]; the router block_sparse_moe.router.layer; a
// shared MLP (GraniteMoeShared, Granite-4.0-H) as shared_mlp.input_linear [2 shared, n_embd]
// (gate rows, then up rows) and output_linear [n_embd, shared].
void GraniteFeedForward(const HParams& h, int l, const std::string& p, Wants& w) {
  const int64_t d = h.n_embd, n = h.n_expert, shared = h.n_ff_shared;
  auto name = [&](const char* base) { return LayerTensorName(l, base); };
  const std::string moe = p + "block_sparse_moe.";
  w.Add(moe + "router.layer.weight", name("ffn_gate_inp"), {n, d}, l).router = true;
  for (int e = 0; e < n; ++e) {
    SlicedStackedExpert(h, l, e, moe + "input_linear.weight", moe + "output_linear.weight", w);
  }
  if (shared == 0) return;
  for (int half = 0; half < 2; ++half) {  // 0: gate, 1: up
    WantedTensor& t = w.Add(p + "shared_mlp.input_linear.weight",
                            name(half == 0 ? "ffn_gate_shexp" : "ffn_up_shexp"), {shared, d}, l);
    t.hf_shape = {2 * shared, d};
    t.first_element = half * shared * d;
  }
  w.Add(p + "shared_mlp.output_linear.weight", name("ffn_down_shexp"), {d, shared}, l);
}

// GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM: llama's attention, Granite's feed-forward.
void GraniteMoe(const HParams& h, Wants& w) {
  for (int l = 0; l < h.n_layer; ++l) {
    GraniteFeedForward(h, l, LlamaLayerNormsAndAttention(h, l, w), w);
  }
}

// A Mamba-2 mixer under `m` (in_proj, the depthwise conv1d [channels, 1, kernel] with its bias,
// dt_bias, A_log — stored as -exp(A_log), as llama.cpp's converters write ssm_a —, D, the gated
// norm [inner] and out_proj) as layer l's ssm_* tensors.
void Mamba2Mixer(const HParams& h, int l, const std::string& m, Wants& w) {
  const int64_t d = h.n_embd, I = h.ssm_inner, H = h.ssm_heads, G = h.ssm_groups;
  const int64_t C = h.ssm_conv_channels(), K = h.ssm_conv_kernel;
  auto name = [&](const char* base) { return LayerTensorName(l, base); };
  w.Add(m + "in_proj.weight", name("ssm_in"), {I + C + H, d}, l);
  w.Vector(m + "conv1d.weight", name("ssm_conv1d"), {C, K}, l).hf_shape = {C, 1, K};
  w.Vector(m + "conv1d.bias", Bias(l, "ssm_conv1d"), {C}, l);
  w.Vector(m + "dt_bias", Bias(l, "ssm_dt"), {H}, l);
  WantedTensor& a = w.Vector(m + "A_log", LayerBareName(l, "ssm_a"), {H, 1}, l);
  a.hf_shape = {H};
  a.value = [](float a_log) { return -std::exp(a_log); };
  w.Vector(m + "D", LayerBareName(l, "ssm_d"), {H, 1}, l).hf_shape = {H};
  w.Vector(m + "norm.weight", name("ssm_norm"), {G, I / G}, l).hf_shape = {I};
  w.Add(m + "out_proj.weight", name("ssm_out"), {d, I}, l);
}

// GraniteMoeHybridForCausalLM: per layer input_layernorm, then a Mamba-2 mixer (under mamba.) or
// llama's attention; post_attention_layernorm and Granite's feed-forward.
void GraniteHybrid(const HParams& h, Wants& w) {
  for (int l = 0; l < h.n_layer; ++l) {
    if (!h.layer_ssm(l)) {
      GraniteFeedForward(h, l, LlamaLayerNormsAndAttention(h, l, w), w);
      continue;
    }
    const std::string p = absl::StrCat("model.layers.", l, ".");
    w.Vector(p + "input_layernorm.weight", LayerTensorName(l, "attn_norm"), {h.n_embd}, l);
    Mamba2Mixer(h, l, p + "mamba.", w);
    w.Vector(p + "post_attention_layernorm.weight", LayerTensorName(l, "ffn_norm"), {h.n_embd}, l);
    GraniteFeedForward(h, l, p, w);
  }
}

// NemotronHForCausalLM (with experts): per layer backbone.layers.L.norm, then its one part under
// mixer.: a Mamba-2 mixer, attention (q/k/v/o_proj, no biases), or the router (gate.weight and
// gate.e_score_correction_bias) with per-expert up_proj / down_proj and the shared expert's
// (shared_experts.), none with a gate; Nemotron 3 Super's latent projections fc1_latent_proj /
// fc2_latent_proj.
void NemotronH(const HParams& h, Wants& w) {
  const int64_t d = h.n_embd, q_dim = h.n_head * h.head_dim, kv_dim = h.n_head_kv * h.head_dim;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("backbone.layers.", l, ".");
    const std::string m = p + "mixer.";
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    w.Vector(p + "norm.weight", name("attn_norm"), {d}, l);
    if (h.layer_ssm(l)) {
      Mamba2Mixer(h, l, m, w);
    } else if (!h.layer_ffn_only(l)) {
      w.Add(m + "q_proj.weight", name("attn_q"), {q_dim, d}, l);
      w.Add(m + "k_proj.weight", name("attn_k"), {kv_dim, d}, l);
      w.Add(m + "v_proj.weight", name("attn_v"), {kv_dim, d}, l);
      w.Add(m + "o_proj.weight", name("attn_output"), {d, q_dim}, l);
    } else {
      w.Add(m + "gate.weight", name("ffn_gate_inp"), {h.n_expert, d}, l).router = true;
      w.Vector(m + "gate.e_score_correction_bias", Bias(l, "exp_probs_b"), {h.n_expert}, l);
      const int64_t xd = h.expert_dim();
      if (h.moe_latent_dim > 0) {  // Nemotron 3 Super
        w.Add(m + "fc1_latent_proj.weight", name("ffn_latent_down"), {xd, d}, l);
        w.Add(m + "fc2_latent_proj.weight", name("ffn_latent_up"), {d, xd}, l);
      }
      for (int e = 0; e < h.n_expert; ++e) {
        const std::string x = absl::StrCat(m, "experts.", e, ".");
        w.Add(x + "up_proj.weight", ExpertTensorName(l, e, "ffn_up"), {h.n_ff_expert, xd}, l, e);
        w.Add(x + "down_proj.weight", ExpertTensorName(l, e, "ffn_down"), {xd, h.n_ff_expert}, l,
              e);
      }
      w.Add(m + "shared_experts.up_proj.weight", name("ffn_up_shexp"), {h.n_ff_shared, d}, l);
      w.Add(m + "shared_experts.down_proj.weight", name("ffn_down_shexp"), {d, h.n_ff_shared}, l);
    }
  }
}

// Qwen3VLMoeForConditionalGeneration's language model under `root` ("model.language_model."):
// Qwen3-MoE's layers with the experts stacked as Llama 4 stacks them (TransposedStackedExpert).
void Qwen3VlMoe(const HfConfig& c, Wants& w) {
  const HParams& h = c.hp;
  const std::string& root = c.model_prefix;
  const int64_t d = h.n_embd, n = h.n_expert;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat(root, "layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    InputNormAndAttention(h, l, p, w);
    w.Vector(p + "self_attn.q_norm.weight", name("attn_q_norm"), {h.head_dim}, l);
    w.Vector(p + "self_attn.k_norm.weight", name("attn_k_norm"), {h.head_dim}, l);
    w.Vector(p + "post_attention_layernorm.weight", name("ffn_norm"), {d}, l);
    const std::string m = p + "mlp.";
    w.Add(m + "gate.weight", name("ffn_gate_inp"), {n, d}, l).router = true;
    for (int e = 0; e < n; ++e) TransposedStackedExpert(h, l, e, m + "experts.", w);
  }
}

// Qwen3NextForCausalLM and Qwen3.5-MoE under `root` ("model.", or "model.language_model." in
// Qwen3.5's multimodal checkpoints): per layer input_layernorm, then a gated delta net
// (linear_attn.) or gated attention (self_attn.: q_proj yields per head its q rows, then its
// output gate's; per-head q_norm / k_norm), post_attention_layernorm, and the router (mlp.gate)
// with experts per expert (mlp.experts.E.*_proj) or stacked (experts.gate_up_proj [n_expert, 2 ff,
// n_embd], the gate's rows first, and experts.down_proj [n_expert, n_embd, ff]) beside a shared
// expert and its sigmoid gate (shared_expert_gate [1, n_embd]). Every RMSNorm but the delta net's
// stores w where the model scales by 1 + w (Qwen3NextRMSNorm), and A_log the log of -A, as
// llama.cpp's converters undo them.
//
// The delta net's value heads: the checkpoints keep them grouped by key head (value head g r + j
// is the j-th of key head g's r). Qwen3-Next runs them so, and fuses q, k, v and z per key head in
// in_proj_qkvz (for each key head: its q, its k, its value heads' v, their z) and beta and alpha
// in in_proj_ba (per key head its value heads' betas, then their alphas: the runtime's ssm_ba).
// Qwen3.5 stores in_proj_qkv (all q, all k, all v), in_proj_z, in_proj_b and in_proj_a apart, and
// the runtime runs its value heads tiled (value head j KH + g reads key head g, llama.cpp's
// converter's order): every per-value-head row, column and value is taken from its grouped place.
void QwenDeltaNetHybrid(const HfConfig& c, const std::function<bool(const std::string&)>& has,
                        Wants& w) {
  const HParams& h = c.hp;
  const std::string& root = c.model_prefix;
  const bool tiled = c.arch == Arch::kQwen35Moe;
  const int64_t d = h.n_embd, S = h.ssm_state, KH = h.ssm_groups, H = h.ssm_heads, r = H / KH;
  const int64_t key_dim = KH * S, I = H * S, C = h.ssm_conv_channels(), K = h.ssm_conv_kernel;
  const int64_t q_dim = h.n_head * h.head_dim, kv_dim = h.n_head_kv * h.head_dim;
  // The checkpoint's place of the runtime's value head t, and of its value rows (S a head).
  auto value_head = [=](int64_t t) { return tiled ? t % KH * r + t / KH : t; };
  auto value_row = [=](int64_t row) { return value_head(row / S) * S + row % S; };
  // The checkpoint's row (of in_proj_qkv, or channel of conv1d) of the runtime's q/k/v row.
  auto qkv_row = [=](int64_t row) {
    return row < 2 * key_dim ? row : 2 * key_dim + value_row(row - 2 * key_dim);
  };
  // Qwen3-Next's in_proj_qkvz row of the runtime's q/k/v row (part 0) or z row (part 1).
  const int64_t group_rows = 2 * S + 2 * r * S;
  auto qkvz_row = [=](int64_t row, int part) {
    if (part == 1) return row / (r * S) * group_rows + 2 * S + r * S + row % (r * S);
    if (row < 2 * key_dim) return row % key_dim / S * group_rows + row / key_dim * S + row % S;
    const int64_t v = row - 2 * key_dim;
    return v / (r * S) * group_rows + 2 * S + v % (r * S);
  };
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat(root, "layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    w.Vector(p + "input_layernorm.weight", name("attn_norm"), {d}, l).value = OneMore;
    w.Vector(p + "post_attention_layernorm.weight", name("post_attention_norm"), {d}, l).value =
        OneMore;
    if (h.layer_ssm(l)) {
      const std::string x = p + "linear_attn.";
      if (tiled) {
        WantedTensor& qkv = w.Add(x + "in_proj_qkv.weight", name("attn_qkv"), {C, d}, l);
        qkv.source_row = qkv_row;
        WantedTensor& z = w.Add(x + "in_proj_z.weight", name("attn_gate"), {I, d}, l);
        z.source_row = value_row;
        for (const auto& [hf, ours] :
             {std::pair{"in_proj_b", "ssm_beta"}, {"in_proj_a", "ssm_alpha"}}) {
          w.Add(absl::StrCat(x, hf, ".weight"), name(ours), {H, d}, l).source_row = value_head;
        }
      } else {
        const Shape fused = {KH * group_rows, d};
        for (int part = 0; part < 2; ++part) {
          WantedTensor& t =
              w.Add(x + "in_proj_qkvz.weight", name(part == 0 ? "attn_qkv" : "attn_gate"),
                    {part == 0 ? C : I, d}, l);
          t.hf_shape = fused;
          t.source_row = [=](int64_t row) { return qkvz_row(row, part); };
        }
        w.Add(x + "in_proj_ba.weight", name("ssm_ba"), {2 * H, d}, l);
      }
      WantedTensor& conv = w.Vector(x + "conv1d.weight", name("ssm_conv1d"), {C, K}, l);
      conv.hf_shape = {C, 1, K};
      conv.gather = [=](int64_t i) { return qkv_row(i / K) * K + i % K; };
      w.Vector(x + "dt_bias", Bias(l, "ssm_dt"), {H}, l).gather = value_head;
      WantedTensor& a = w.Vector(x + "A_log", LayerBareName(l, "ssm_a"), {H}, l);
      a.gather = value_head;
      a.value = [](float a_log) { return -std::exp(a_log); };
      w.Vector(x + "norm.weight", name("ssm_norm"), {S}, l);
      w.Add(x + "out_proj.weight", name("ssm_out"), {d, I}, l).gather = [=](int64_t i) {
        return i / I * I + value_row(i % I);
      };
    } else {
      const std::string a = p + "self_attn.";
      w.Add(a + "q_proj.weight", name("attn_q"), {2 * q_dim, d}, l);
      w.Add(a + "k_proj.weight", name("attn_k"), {kv_dim, d}, l);
      w.Add(a + "v_proj.weight", name("attn_v"), {kv_dim, d}, l);
      w.Add(a + "o_proj.weight", name("attn_output"), {d, q_dim}, l);
      w.Vector(a + "q_norm.weight", name("attn_q_norm"), {h.head_dim}, l).value = OneMore;
      w.Vector(a + "k_norm.weight", name("attn_k_norm"), {h.head_dim}, l).value = OneMore;
    }
    const std::string m = p + "mlp.";
    w.Add(m + "gate.weight", name("ffn_gate_inp"), {h.n_expert, d}, l).router = true;
    const bool stacked = has(m + "experts.gate_up_proj");
    for (int e = 0; e < h.n_expert; ++e) {
      if (stacked) {
        SlicedStackedExpert(h, l, e, m + "experts.gate_up_proj", m + "experts.down_proj", w);
      } else {
        AddExpert(h, l, e, absl::StrCat(m, "experts.", e, "."), w);
      }
    }
    AddMlp(h, l, m + "shared_expert.", "_shexp", h.n_ff_shared, w);
    w.Vector(m + "shared_expert_gate.weight", name("ffn_gate_inp_shexp"), {d}, l).hf_shape = {1, d};
  }
}

// Llama4ForCausalLM (the language model of Llama4ForConditionalGeneration): llama's attention; in
// the layers without experts a dense MLP (feed_forward.*_proj, intermediate_size_mlp wide), in
// the others the router, a shared expert and the experts stacked per layer:
// experts.gate_up_proj [n_expert, n_embd, 2 ff] (inputs first; the gate's ff columns, then the
// up's) and experts.down_proj [n_expert, ff, n_embd], both transposed against the runtime's rows.
void Llama4(const HParams& h, Wants& w) {
  const int64_t d = h.n_embd, n = h.n_expert;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = LlamaLayerNormsAndAttention(h, l, w);
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    const std::string f = p + "feed_forward.";
    if (!h.layer_has_experts(l)) {
      AddMlp(h, l, f, "", h.n_ff_dense, w);
      continue;
    }
    w.Add(f + "router.weight", name("ffn_gate_inp"), {n, d}, l).router = true;
    for (int e = 0; e < n; ++e) TransposedStackedExpert(h, l, e, f + "experts.", w);
    AddMlp(h, l, f + "shared_expert.", "_shexp", h.n_ff_shared, w);
  }
}

// BailingMoeV2ForCausalLM: q/k/v as one attention.query_key_value [q + 2 kv, n_embd] (the q rows,
// then k's and v's), taken apart by rows; per-head query_layernorm / key_layernorm;
// attention.dense the output; DeepSeek's feed-forward layout with the selection bias in
// mlp.gate.expert_bias. The MTP layers after num_hidden_layers are in the checkpoint but not
// wanted.
void BailingMoe2(const HParams& h, Wants& w) {
  const int64_t d = h.n_embd, q = h.n_head * h.head_dim, kv = h.n_head_kv * h.head_dim;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    w.Vector(p + "input_layernorm.weight", name("attn_norm"), {d}, l);
    int64_t first_row = 0;
    for (const auto& [part, rows] : {std::pair{"attn_q", q}, {"attn_k", kv}, {"attn_v", kv}}) {
      WantedTensor& t = w.Add(p + "attention.query_key_value.weight", name(part), {rows, d}, l);
      t.hf_shape = {q + 2 * kv, d};
      t.first_element = first_row * d;
      first_row += rows;
    }
    if (h.qk_norm == QkNorm::kPerHead) {
      w.Vector(p + "attention.query_layernorm.weight", name("attn_q_norm"), {h.head_dim}, l);
      w.Vector(p + "attention.key_layernorm.weight", name("attn_k_norm"), {h.head_dim}, l);
    }
    w.Add(p + "attention.dense.weight", name("attn_output"), {d, q}, l);
    w.Vector(p + "post_attention_layernorm.weight", name("ffn_norm"), {d}, l);
    AddFeedForward(h, l, p, w, {"mlp.gate.expert_bias"});
  }
}

// Dots1ForCausalLM: Qwen3's attention (per-head q_norm / k_norm), DeepSeek's feed-forward layout.
void Dots1(const HParams& h, Wants& w) {
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = LlamaLayerNormsAndAttention(h, l, w);
    w.Vector(p + "self_attn.q_norm.weight", LayerTensorName(l, "attn_q_norm"), {h.head_dim}, l);
    w.Vector(p + "self_attn.k_norm.weight", LayerTensorName(l, "attn_k_norm"), {h.head_dim}, l);
    AddFeedForward(h, l, p, w);
  }
}

// Lfm2MoeForCausalLM: per layer operator_norm, then a short convolution (conv.in_proj, the
// depthwise conv.conv [d, 1, kernel], conv.out_proj) or Qwen3-style attention (q_layernorm,
// k_layernorm, out_proj); ffn_norm and feed_forward's w1 (gate), w3 (up), w2 (down), per expert
// under experts.E., with the router gate and expert_bias. (The final norm is embedding_norm.)
void Lfm2Moe(const HParams& h, Wants& w) {
  const int64_t d = h.n_embd, q = h.n_head * h.head_dim, kv = h.n_head_kv * h.head_dim;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    w.Vector(p + "operator_norm.weight", name("attn_norm"), {d}, l);
    if (h.layer_short_conv(l)) {
      w.Add(p + "conv.in_proj.weight", name("shortconv.in_proj"), {3 * d, d}, l);
      w.Vector(p + "conv.conv.weight", name("shortconv.conv"), {d, h.short_conv_kernel}, l)
          .hf_shape = {d, 1, h.short_conv_kernel};
      w.Add(p + "conv.out_proj.weight", name("shortconv.out_proj"), {d, d}, l);
    } else {
      w.Add(p + "self_attn.q_proj.weight", name("attn_q"), {q, d}, l);
      w.Add(p + "self_attn.k_proj.weight", name("attn_k"), {kv, d}, l);
      w.Add(p + "self_attn.v_proj.weight", name("attn_v"), {kv, d}, l);
      w.Add(p + "self_attn.out_proj.weight", name("attn_output"), {d, q}, l);
      w.Vector(p + "self_attn.q_layernorm.weight", name("attn_q_norm"), {h.head_dim}, l);
      w.Vector(p + "self_attn.k_layernorm.weight", name("attn_k_norm"), {h.head_dim}, l);
    }
    w.Vector(p + "ffn_norm.weight", name("ffn_norm"), {d}, l);
    const std::string f = p + "feed_forward.";
    auto mlp = [&](const std::string& x, int e, int64_t width) {
      auto tensor = [&](const char* base) {
        return e < 0 ? name(base) : ExpertTensorName(l, e, base);
      };
      w.Add(x + "w1.weight", tensor("ffn_gate"), {width, d}, l, e);
      w.Add(x + "w3.weight", tensor("ffn_up"), {width, d}, l, e);
      w.Add(x + "w2.weight", tensor("ffn_down"), {d, width}, l, e);
    };
    if (!h.layer_has_experts(l)) {
      mlp(f, -1, h.n_ff_dense);
      continue;
    }
    w.Add(f + "gate.weight", name("ffn_gate_inp"), {h.n_expert, d}, l).router = true;
    if (h.has_selection_bias) {
      w.Vector(f + "expert_bias", Bias(l, "exp_probs_b"), {h.n_expert}, l);
    }
    for (int e = 0; e < h.n_expert; ++e) mlp(absl::StrCat(f, "experts.", e, "."), e, h.n_ff_expert);
  }
}

// DeepseekV2/V3ForCausalLM: multi-head latent attention, stored as transformers keeps it. The
// checkpoint's kv_b_proj [n_head x (nope + v), kv_lora_rank] holds per head the rows that lift
// the latent to the head's key (nope) and then to its value (v); the runtime wants them apart
// and the key part transposed, as llama.cpp's converter writes them:
// attn_k_b[h][r][j] = kv_b[h (nope + v) + j][r], attn_v_b[h][i][r] = kv_b[h (nope + v) + nope +
// i][r].
void Deepseek2(const HParams& h, Wants& w) {
  const int64_t d = h.n_embd, r = h.kv_lora_rank, nope = h.qk_nope_dim, v = h.v_head_dim;
  const int64_t q_rows = h.n_head * (nope + h.rope_dim);
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    w.Vector(p + "input_layernorm.weight", name("attn_norm"), {d}, l);
    if (h.q_lora_rank > 0) {
      w.Add(p + "self_attn.q_a_proj.weight", name("attn_q_a"), {h.q_lora_rank, d}, l);
      w.Vector(p + "self_attn.q_a_layernorm.weight", name("attn_q_a_norm"), {h.q_lora_rank}, l);
      w.Add(p + "self_attn.q_b_proj.weight", name("attn_q_b"), {q_rows, h.q_lora_rank}, l);
    } else {
      w.Add(p + "self_attn.q_proj.weight", name("attn_q"), {q_rows, d}, l);
    }
    w.Add(p + "self_attn.kv_a_proj_with_mqa.weight", name("attn_kv_a_mqa"), {r + h.rope_dim, d}, l);
    w.Vector(p + "self_attn.kv_a_layernorm.weight", name("attn_kv_a_norm"), {r}, l);
    const std::string kv_b = p + "self_attn.kv_b_proj.weight";
    const Shape kv_b_shape = {h.n_head * (nope + v), r};
    WantedTensor& k_b = w.Add(kv_b, name("attn_k_b"), {h.n_head, r, nope}, l);
    k_b.hf_shape = kv_b_shape;
    k_b.gather = [=](int64_t i) {
      const int64_t head = i / (r * nope), row = i / nope % r, col = i % nope;
      return (head * (nope + v) + col) * r + row;
    };
    WantedTensor& v_b = w.Add(kv_b, name("attn_v_b"), {h.n_head, v, r}, l);
    v_b.hf_shape = kv_b_shape;
    v_b.source_row = [=](int64_t row) { return row / v * (nope + v) + nope + row % v; };
    w.Add(p + "self_attn.o_proj.weight", name("attn_output"), {d, h.n_head * v}, l);
    w.Vector(p + "post_attention_layernorm.weight", name("ffn_norm"), {d}, l);
    AddFeedForward(h, l, p, w);
  }
}

// GptOssForCausalLM. The experts are stacked per layer: gate_up_proj [n_expert, n_embd, 2 ff]
// (inputs first; gate and up alternate along the last dimension: gate_up[..., ::2] is the gate),
// down_proj [n_expert, ff, n_embd], with biases gate_up_proj_bias [n_expert, 2 ff] (interleaved
// alike) and down_proj_bias [n_expert, n_embd]. The released checkpoints hold the weights as
// MXFP4 instead: *_blocks [n_expert, rows, cols / 32, 16] and *_scales [n_expert, rows, cols / 32]
// with rows as outputs (gate_up: 2 ff rows, even ones the gate).
void GptOss(const HParams& h, const std::function<bool(const std::string&)>& has, Wants& w) {
  const int64_t d = h.n_embd;
  const int64_t n = h.n_expert, ff = h.n_ff_expert;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    InputNormAndAttention(h, l, p, w);
    w.Vector(p + "self_attn.o_proj.bias", Bias(l, "attn_output"), {d}, l);
    w.Vector(p + "self_attn.sinks", name("attn_sinks"), {h.n_head}, l);
    w.Vector(p + "post_attention_layernorm.weight", name("post_attention_norm"), {d}, l);
    w.Add(p + "mlp.router.weight", name("ffn_gate_inp"), {n, d}, l).router = true;
    w.Vector(p + "mlp.router.bias", Bias(l, "ffn_gate_inp"), {n}, l);

    const std::string x = p + "mlp.experts.";
    for (int half = 0; half < 2; ++half) {  // 0: gate (even), 1: up (odd)
      WantedTensor& b = w.Vector(x + "gate_up_proj_bias",
                                 Bias(l, half == 0 ? "ffn_gate_exps" : "ffn_up_exps"), {n, ff}, l);
      b.hf_shape = {n, 2 * ff};
      b.gather = [=](int64_t i) { return i / ff * 2 * ff + 2 * (i % ff) + half; };
    }
    w.Vector(x + "down_proj_bias", Bias(l, "ffn_down_exps"), {n, d}, l);

    const bool mxfp4 = has(x + "gate_up_proj_blocks");
    for (int e = 0; e < n; ++e) {
      for (int half = 0; half < 2; ++half) {
        const std::string canonical = ExpertTensorName(l, e, half == 0 ? "ffn_gate" : "ffn_up");
        if (mxfp4) {
          WantedTensor& t = w.Add(x + "gate_up_proj_blocks", canonical, {ff, d}, l, e);
          t.hf_shape = {n, 2 * ff, d / 32, 16};
          t.mx_scales = x + "gate_up_proj_scales";
          t.mx_scales_shape = {n, 2 * ff, d / 32};
          t.mx_row = [=](int64_t row) { return e * 2 * ff + 2 * row + half; };
        } else {
          WantedTensor& t = w.Add(x + "gate_up_proj", canonical, {ff, d}, l, e);
          t.hf_shape = {n, d, 2 * ff};
          Transposed(e * d * 2 * ff + half, 2, 2 * ff, t);  // gate and up columns alternate
        }
      }
      const std::string down = ExpertTensorName(l, e, "ffn_down");
      if (mxfp4) {
        WantedTensor& t = w.Add(x + "down_proj_blocks", down, {d, ff}, l, e);
        t.hf_shape = {n, d, ff / 32, 16};
        t.mx_scales = x + "down_proj_scales";
        t.mx_scales_shape = {n, d, ff / 32};
        t.mx_row = [=](int64_t row) { return e * d + row; };
      } else {
        WantedTensor& t = w.Add(x + "down_proj", down, {d, ff}, l, e);
        t.hf_shape = {n, ff, d};
        Transposed(e * ff * d, 1, d, t);
      }
    }
  }
}

}  // namespace

std::vector<WantedTensor> WantedTensors(const HfConfig& c,
                                        const std::function<bool(const std::string&)>& has) {
  std::vector<WantedTensor> out;
  Wants w(&out);
  if (c.arch == Arch::kBailingMoe2) {
    AddEmbeddings(c, w, "model.word_embeddings.weight", "model.norm.weight");
  } else if (c.arch == Arch::kLfm2Moe) {
    AddEmbeddings(c, w, "model.embed_tokens.weight", "model.embedding_norm.weight");
  } else if (c.arch == Arch::kNemotronHMoe) {
    AddEmbeddings(c, w, "backbone.embeddings.weight", "backbone.norm_f.weight");
  } else if (c.arch == Arch::kQwen3Next || c.arch == Arch::kQwen35Moe) {
    AddEmbeddings(c, w, OneMore);
  } else {
    AddEmbeddings(c, w);  // under HfConfig::model_prefix
  }
  switch (c.arch) {
    case Arch::kGlm4Moe:
      Glm4Moe(c.hp, w);
      break;
    case Arch::kDeepseek2:
      Deepseek2(c.hp, w);
      break;
    case Arch::kGptOss:
      GptOss(c.hp, has, w);
      break;
    case Arch::kErnie45Moe:
      Ernie45Moe(c.hp, w);
      break;
    case Arch::kGraniteMoe:
      GraniteMoe(c.hp, w);
      break;
    case Arch::kLlama4:
      Llama4(c.hp, w);
      break;
    case Arch::kBailingMoe2:
      BailingMoe2(c.hp, w);
      break;
    case Arch::kDots1:
      Dots1(c.hp, w);
      break;
    case Arch::kLfm2Moe:
      Lfm2Moe(c.hp, w);
      break;
    case Arch::kGraniteHybrid:
      GraniteHybrid(c.hp, w);
      break;
    case Arch::kDeepseek:
      Deepseek(c.hp, w);
      break;
    case Arch::kNemotronHMoe:
      NemotronH(c.hp, w);
      break;
    case Arch::kQwen3Next:
    case Arch::kQwen35Moe:
      QwenDeltaNetHybrid(c, has, w);
      break;
    case Arch::kQwen3VlMoe:
      Qwen3VlMoe(c, w);
      break;
    default:
      ClassicFamilies(c, w);
  }
  for (WantedTensor& t : out) {
    t.hf_name = c.tensor_prefix + t.hf_name;
    if (!t.mx_scales.empty()) t.mx_scales = c.tensor_prefix + t.mx_scales;
  }
  return out;
}

}  // namespace moe
