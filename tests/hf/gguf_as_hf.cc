#include "tests/hf/gguf_as_hf.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_import.h"
#include "tests/hf/checkpoint_builder.h"

namespace moe::testing {
namespace {

using Json = nlohmann::json;
using Shape = std::vector<int64_t>;

// The GGUF's tensors by name, as float values (outermost dimension first) or raw blocks.
class GgufTensors {
 public:
  explicit GgufTensors(const GgufFile& g) {
    for (const GgufTensorInfo& t : g.tensors()) by_name_[t.name] = &t;
  }
  bool Has(const std::string& name) const { return by_name_.count(name) > 0; }
  const GgufTensorInfo& Info(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      ADD_FAILURE() << "the GGUF has no tensor '" << name << "'";
      static const GgufTensorInfo kNone{};
      return kNone;
    }
    return *it->second;
  }
  Shape ShapeOf(const std::string& name) const {
    const GgufTensorInfo& t = Info(name);
    return Shape(t.ne.rbegin(), t.ne.rend());
  }
  DType TypeOf(const std::string& name) const {
    auto type = DTypeFromGgml(Info(name).ggml_type, name);
    EXPECT_TRUE(type.ok()) << type.status();
    return type.value_or(DType::kF32);
  }
  std::vector<float> Floats(const std::string& name) const {
    const GgufTensorInfo& t = Info(name);
    if (t.ne.empty()) return {};
    const DType type = TypeOf(name);
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    const int64_t cols = t.ne[0], rows = n / cols;
    std::vector<float> out(n);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(type, t.data.data() + r * RowBytes(type, cols), out.data() + r * cols, cols);
    }
    return out;
  }

 private:
  std::map<std::string, const GgufTensorInfo*> by_name_;
};

RawTensor F32(Shape shape, const std::vector<float>& values) {
  RawTensor t;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * 4);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

class Writer {
 public:
  explicit Writer(const GgufTensors& g) : g_(g) {}
  // The GGUF tensor as it is (shape and values), under an HF name.
  void Copy(const std::string& hf, const std::string& gguf) {
    out_[hf] = F32(g_.ShapeOf(gguf), g_.Floats(gguf));
  }
  void Put(const std::string& hf, Shape shape, const std::vector<float>& values) {
    out_[hf] = F32(std::move(shape), values);
  }
  void PutRaw(const std::string& hf, RawTensor t) { out_[hf] = std::move(t); }
  std::map<std::string, RawTensor>& tensors() { return out_; }

 private:
  const GgufTensors& g_;
  std::map<std::string, RawTensor> out_;
};

std::string Blk(int l, const char* rest) { return absl::StrCat("blk.", l, ".", rest); }

// The input norm and grouped-query attention, with q/k/v biases (glm4moe, gpt-oss) or without
// (qwen3moe).
void InputNormAndAttention(Writer& w, int l, const std::string& p, bool biases) {
  w.Copy(p + "input_layernorm.weight", Blk(l, "attn_norm.weight"));
  for (const char* x : {"q", "k", "v"}) {
    w.Copy(absl::StrCat(p, "self_attn.", x, "_proj.weight"),
           Blk(l, absl::StrCat("attn_", x, ".weight").c_str()));
    if (biases) {
      w.Copy(absl::StrCat(p, "self_attn.", x, "_proj.bias"),
             Blk(l, absl::StrCat("attn_", x, ".bias").c_str()));
    }
  }
  w.Copy(p + "self_attn.o_proj.weight", Blk(l, "attn_output.weight"));
}

// The router (mlp.gate), its optional e_score_correction_bias, and one matrix per expert and
// projection (llama.cpp stacks them) of GLM, DeepSeek and Qwen3-MoE.
void RoutedExperts(const GgufTensors& g, Writer& w, int l, const std::string& p) {
  w.Copy(p + "mlp.gate.weight", Blk(l, "ffn_gate_inp.weight"));
  if (g.Has(Blk(l, "exp_probs_b.bias"))) {
    w.Copy(p + "mlp.gate.e_score_correction_bias", Blk(l, "exp_probs_b.bias"));
  }
  for (const char* proj : {"gate", "up", "down"}) {
    const std::string stack = Blk(l, (std::string("ffn_") + proj + "_exps.weight").c_str());
    const Shape s = g.ShapeOf(stack);  // [n_expert, rows, cols]
    const std::vector<float> v = g.Floats(stack);
    const int64_t slab = s[1] * s[2];
    for (int64_t e = 0; e < s[0]; ++e) {
      w.Put(absl::StrCat(p, "mlp.experts.", e, ".", proj, "_proj.weight"), {s[1], s[2]},
            std::vector<float>(v.begin() + e * slab, v.begin() + (e + 1) * slab));
    }
  }
}

// GLM / DeepSeek feed-forward: a dense MLP, or the routed experts and the shared experts.
void FeedForward(const GgufTensors& g, Writer& w, int l, const std::string& p) {
  if (g.Has(Blk(l, "ffn_gate.weight"))) {
    w.Copy(p + "mlp.gate_proj.weight", Blk(l, "ffn_gate.weight"));
    w.Copy(p + "mlp.up_proj.weight", Blk(l, "ffn_up.weight"));
    w.Copy(p + "mlp.down_proj.weight", Blk(l, "ffn_down.weight"));
    return;
  }
  RoutedExperts(g, w, l, p);
  w.Copy(p + "mlp.shared_experts.gate_proj.weight", Blk(l, "ffn_gate_shexp.weight"));
  w.Copy(p + "mlp.shared_experts.up_proj.weight", Blk(l, "ffn_up_shexp.weight"));
  w.Copy(p + "mlp.shared_experts.down_proj.weight", Blk(l, "ffn_down_shexp.weight"));
}

// Float fields as a config.json writes them: short decimals (1e-06, 0.707), not float noise.
double Decimal(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}

Json CommonConfig(const HParams& h, const char* arch, const char* model_type) {
  return Json{{"architectures", {arch}},
              {"model_type", model_type},
              {"vocab_size", h.n_vocab},
              {"hidden_size", h.n_embd},
              {"num_attention_heads", h.n_head},
              {"max_position_embeddings", h.n_ctx_train},
              {"num_hidden_layers", h.n_layer},
              {"rms_norm_eps", Decimal(h.rms_eps)},
              {"rope_theta", static_cast<double>(h.rope_freq_base)},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", h.tied_output},
              {"torch_dtype", "float32"}};
}

Json Glm4Moe(const GgufTensors& g, const HParams& h, Writer& w) {
  Json c = CommonConfig(h, "Glm4MoeForCausalLM", "glm4_moe");
  c["num_nextn_predict_layers"] = h.n_nextn_layer;
  c["num_key_value_heads"] = h.n_head_kv;
  c["head_dim"] = h.head_dim;
  c["partial_rotary_factor"] = static_cast<double>(h.rope_dim) / h.head_dim;
  c["attention_bias"] = true;
  c["use_qk_norm"] = h.qk_norm != QkNorm::kNone;
  c["rope_scaling"] = nullptr;
  c["n_routed_experts"] = h.n_expert;
  c["num_experts_per_tok"] = h.n_expert_used;
  c["intermediate_size"] = h.n_ff_dense;
  c["moe_intermediate_size"] = h.n_ff_expert;
  c["n_shared_experts"] = h.n_ff_shared / h.n_ff_expert;
  c["first_k_dense_replace"] = h.n_layer_dense;
  c["norm_topk_prob"] = h.norm_topk_prob;
  c["routed_scaling_factor"] = static_cast<double>(h.routed_scale);
  c["n_group"] = h.n_expert_groups;
  c["topk_group"] = h.n_group_used;
  // Every block of the GGUF, the MTP block (index num_hidden_layers) included: transformers'
  // checkpoints carry it as one more decoder layer plus its own projections and head.
  for (int l = 0; l < h.n_layer + h.n_nextn_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    InputNormAndAttention(w, l, p, /*biases=*/true);
    if (h.qk_norm != QkNorm::kNone) {
      w.Copy(p + "self_attn.q_norm.weight", Blk(l, "attn_q_norm.weight"));
      w.Copy(p + "self_attn.k_norm.weight", Blk(l, "attn_k_norm.weight"));
    }
    w.Copy(p + "post_attention_layernorm.weight", Blk(l, "post_attention_norm.weight"));
    FeedForward(g, w, l, p);
    if (l >= h.n_layer) {
      w.Copy(p + "eh_proj.weight", Blk(l, "nextn.eh_proj.weight"));
      w.Copy(p + "enorm.weight", Blk(l, "nextn.enorm.weight"));
      w.Copy(p + "hnorm.weight", Blk(l, "nextn.hnorm.weight"));
      w.Copy(p + "embed_tokens.weight", Blk(l, "nextn.embed_tokens.weight"));
      w.Copy(p + "shared_head.head.weight", Blk(l, "nextn.shared_head_head.weight"));
      w.Copy(p + "shared_head.norm.weight", Blk(l, "nextn.shared_head_norm.weight"));
    }
  }
  return c;
}

// Qwen3MoeForCausalLM: unbiased attention with per-head q_norm / k_norm, every layer routed.
Json Qwen3Moe(const GgufTensors& g, const HParams& h, Writer& w) {
  Json c = CommonConfig(h, "Qwen3MoeForCausalLM", "qwen3_moe");
  c["num_key_value_heads"] = h.n_head_kv;
  c["head_dim"] = h.head_dim;
  c["attention_bias"] = false;
  c["rope_scaling"] = nullptr;
  c["sliding_window"] = nullptr;
  c["num_experts"] = h.n_expert;
  c["num_experts_per_tok"] = h.n_expert_used;
  c["moe_intermediate_size"] = h.n_ff_expert;
  c["norm_topk_prob"] = h.norm_topk_prob;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = Json::array();
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    InputNormAndAttention(w, l, p, /*biases=*/false);
    w.Copy(p + "self_attn.q_norm.weight", Blk(l, "attn_q_norm.weight"));
    w.Copy(p + "self_attn.k_norm.weight", Blk(l, "attn_k_norm.weight"));
    w.Copy(p + "post_attention_layernorm.weight", Blk(l, "ffn_norm.weight"));
    RoutedExperts(g, w, l, p);
  }
  return c;
}

Json Deepseek(const GgufTensors& g, const HParams& h, Writer& w) {
  const bool v3 = h.gating == Gating::kSigmoid;
  Json c = CommonConfig(h, v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM",
                        v3 ? "deepseek_v3" : "deepseek_v2");
  c["num_key_value_heads"] = h.n_head;
  c["q_lora_rank"] = h.q_lora_rank > 0 ? Json(h.q_lora_rank) : Json(nullptr);
  c["kv_lora_rank"] = h.kv_lora_rank;
  c["qk_nope_head_dim"] = h.qk_nope_dim;
  c["qk_rope_head_dim"] = h.rope_dim;
  c["v_head_dim"] = h.v_head_dim;
  c["n_routed_experts"] = h.n_expert;
  c["num_experts_per_tok"] = h.n_expert_used;
  c["intermediate_size"] = h.n_ff_dense;
  c["moe_intermediate_size"] = h.n_ff_expert;
  c["n_shared_experts"] = h.n_ff_shared / h.n_ff_expert;
  c["first_k_dense_replace"] = h.n_layer_dense;
  c["moe_layer_freq"] = 1;
  c["norm_topk_prob"] = h.norm_topk_prob;
  c["routed_scaling_factor"] = static_cast<double>(h.routed_scale);
  c["scoring_func"] = v3 ? "sigmoid" : "softmax";
  c["topk_method"] = v3 ? "noaux_tc" : "greedy";
  c["n_group"] = h.n_expert_groups;
  c["topk_group"] = h.n_group_used;
  c["attention_bias"] = false;
  // The GGUF keeps 0.1 x mscale_all_dim; the checkpoint states mscale = mscale_all_dim.
  const double mscale = Decimal(h.yarn_log_mul * 10);
  c["rope_scaling"] = {{"type", "yarn"},
                       {"factor", static_cast<double>(h.yarn_factor)},
                       {"original_max_position_embeddings", h.yarn_orig_ctx},
                       {"beta_fast", static_cast<double>(h.yarn_beta_fast)},
                       {"beta_slow", static_cast<double>(h.yarn_beta_slow)},
                       {"mscale", mscale},
                       {"mscale_all_dim", mscale}};
  if (v3) c["num_nextn_predict_layers"] = 0;
  const int64_t heads = h.n_head, r = h.kv_lora_rank, nope = h.qk_nope_dim, v = h.v_head_dim;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    w.Copy(p + "input_layernorm.weight", Blk(l, "attn_norm.weight"));
    if (h.q_lora_rank > 0) {
      w.Copy(p + "self_attn.q_a_proj.weight", Blk(l, "attn_q_a.weight"));
      w.Copy(p + "self_attn.q_a_layernorm.weight", Blk(l, "attn_q_a_norm.weight"));
      w.Copy(p + "self_attn.q_b_proj.weight", Blk(l, "attn_q_b.weight"));
    } else {
      w.Copy(p + "self_attn.q_proj.weight", Blk(l, "attn_q.weight"));
    }
    w.Copy(p + "self_attn.kv_a_proj_with_mqa.weight", Blk(l, "attn_kv_a_mqa.weight"));
    w.Copy(p + "self_attn.kv_a_layernorm.weight", Blk(l, "attn_kv_a_norm.weight"));
    // kv_b_proj [heads x (nope + v), r]: per head, the key rows (attn_k_b [heads, r, nope]
    // transposed back) then the value rows (attn_v_b [heads, v, r]).
    const std::vector<float> k_b = g.Floats(Blk(l, "attn_k_b.weight"));
    const std::vector<float> v_b = g.Floats(Blk(l, "attn_v_b.weight"));
    std::vector<float> kv_b(heads * (nope + v) * r);
    for (int64_t hd = 0; hd < heads; ++hd) {
      for (int64_t a = 0; a < r; ++a) {
        for (int64_t j = 0; j < nope; ++j) {
          kv_b[(hd * (nope + v) + j) * r + a] = k_b[(hd * r + a) * nope + j];
        }
      }
      for (int64_t i = 0; i < v; ++i) {
        for (int64_t a = 0; a < r; ++a) {
          kv_b[(hd * (nope + v) + nope + i) * r + a] = v_b[(hd * v + i) * r + a];
        }
      }
    }
    w.Put(p + "self_attn.kv_b_proj.weight", {heads * (nope + v), r}, kv_b);
    w.Copy(p + "self_attn.o_proj.weight", Blk(l, "attn_output.weight"));
    w.Copy(p + "post_attention_layernorm.weight", Blk(l, "ffn_norm.weight"));
    FeedForward(g, w, l, p);
  }
  return c;
}

// GGUF MXFP4 blocks (scale, then values j and j + 16 in byte j) -> transformers' *_blocks
// (values 2b and 2b + 1 in byte b) and *_scales, rows `pick` of a [n_expert, rows, cols] stack
// (row r of the result from row pick(r) of expert e), as [n_expert, out_rows, cols/32, 16].
void Mxfp4ToHf(const GgufTensorInfo& t, int64_t out_rows,
               const std::function<int64_t(int64_t)>& row_of, std::vector<uint8_t>* blocks,
               std::vector<uint8_t>* scales) {
  const int64_t cols = t.ne[0], rows = t.ne[1], experts = t.ne[2], groups = cols / 32;
  blocks->assign(experts * out_rows * groups * 16, 0);
  scales->assign(experts * out_rows * groups, 0);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t out = e * out_rows + row_of(r);
      for (int64_t gi = 0; gi < groups; ++gi) {
        const uint8_t* b = t.data.data() + ((e * rows + r) * groups + gi) * 17;
        uint8_t codes[32];
        for (int j = 0; j < 16; ++j) {
          codes[j] = b[1 + j] & 0x0f;
          codes[j + 16] = b[1 + j] >> 4;
        }
        (*scales)[out * groups + gi] = b[0];
        for (int j = 0; j < 16; ++j) {
          (*blocks)[(out * groups + gi) * 16 + j] = codes[2 * j] | (codes[2 * j + 1] << 4);
        }
      }
    }
  }
}

RawTensor U8(Shape shape, std::vector<uint8_t> bytes) {
  RawTensor t;
  t.dtype = "U8";
  t.shape = std::move(shape);
  t.bytes = std::move(bytes);
  return t;
}

Json GptOss(const GgufTensors& g, const HParams& h, Writer& w) {
  Json c = CommonConfig(h, "GptOssForCausalLM", "gpt_oss");
  c["num_key_value_heads"] = h.n_head_kv;
  c["head_dim"] = h.head_dim;
  c["num_local_experts"] = h.n_expert;
  c["num_experts_per_tok"] = h.n_expert_used;
  c["experts_per_token"] = h.n_expert_used;
  c["intermediate_size"] = h.n_ff_expert;
  c["sliding_window"] = h.sliding_window;
  c["attention_bias"] = true;
  c["swiglu_limit"] = 7.0;
  Json types = Json::array();
  for (int l = 0; l < h.n_layer; ++l) {
    types.push_back(h.layer_slides(l) ? "sliding_attention" : "full_attention");
  }
  c["layer_types"] = types;
  c["initial_context_length"] = h.yarn_orig_ctx;
  c["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", static_cast<double>(h.yarn_factor)},
                       {"beta_fast", static_cast<double>(h.yarn_beta_fast)},
                       {"beta_slow", static_cast<double>(h.yarn_beta_slow)},
                       {"truncate", false},
                       {"original_max_position_embeddings", h.yarn_orig_ctx}};
  const int64_t n = h.n_expert, d = h.n_embd, ff = h.n_ff_expert;
  bool mxfp4 = false;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    InputNormAndAttention(w, l, p, /*biases=*/true);
    w.Copy(p + "self_attn.o_proj.bias", Blk(l, "attn_output.bias"));
    w.Copy(p + "self_attn.sinks", Blk(l, "attn_sinks.weight"));
    w.Copy(p + "post_attention_layernorm.weight", Blk(l, "post_attention_norm.weight"));
    w.Copy(p + "mlp.router.weight", Blk(l, "ffn_gate_inp.weight"));
    w.Copy(p + "mlp.router.bias", Blk(l, "ffn_gate_inp.bias"));
    // Biases: gate_up_proj_bias [n, 2 ff] with gate and up alternating.
    const std::vector<float> gb = g.Floats(Blk(l, "ffn_gate_exps.bias"));
    const std::vector<float> ub = g.Floats(Blk(l, "ffn_up_exps.bias"));
    std::vector<float> gub(n * 2 * ff);
    for (int64_t e = 0; e < n; ++e) {
      for (int64_t f = 0; f < ff; ++f) {
        gub[e * 2 * ff + 2 * f] = gb[e * ff + f];
        gub[e * 2 * ff + 2 * f + 1] = ub[e * ff + f];
      }
    }
    w.Put(p + "mlp.experts.gate_up_proj_bias", {n, 2 * ff}, gub);
    w.Copy(p + "mlp.experts.down_proj_bias", Blk(l, "ffn_down_exps.bias"));

    const std::string gate = Blk(l, "ffn_gate_exps.weight"), up = Blk(l, "ffn_up_exps.weight"),
                      down = Blk(l, "ffn_down_exps.weight");
    if (g.TypeOf(gate) == DType::kMXFP4) {
      mxfp4 = true;
      // gate_up rows: 2f the gate's row f, 2f + 1 the up's.
      std::vector<uint8_t> gate_blocks, gate_scales, up_blocks, up_scales;
      Mxfp4ToHf(
          g.Info(gate), 2 * ff, [](int64_t r) { return 2 * r; }, &gate_blocks, &gate_scales);
      Mxfp4ToHf(
          g.Info(up), 2 * ff, [](int64_t r) { return 2 * r + 1; }, &up_blocks, &up_scales);
      for (size_t i = 0; i < gate_blocks.size(); ++i) gate_blocks[i] |= up_blocks[i];
      for (size_t i = 0; i < gate_scales.size(); ++i) gate_scales[i] |= up_scales[i];
      w.PutRaw(p + "mlp.experts.gate_up_proj_blocks",
               U8({n, 2 * ff, d / 32, 16}, std::move(gate_blocks)));
      w.PutRaw(p + "mlp.experts.gate_up_proj_scales",
               U8({n, 2 * ff, d / 32}, std::move(gate_scales)));
      std::vector<uint8_t> down_blocks, down_scales;
      Mxfp4ToHf(
          g.Info(down), d, [](int64_t r) { return r; }, &down_blocks, &down_scales);
      w.PutRaw(p + "mlp.experts.down_proj_blocks", U8({n, d, ff / 32, 16}, std::move(down_blocks)));
      w.PutRaw(p + "mlp.experts.down_proj_scales", U8({n, d, ff / 32}, std::move(down_scales)));
      continue;
    }
    // gate_up_proj [n, d, 2 ff] (inputs first, gate and up alternating), down_proj [n, ff, d].
    const std::vector<float> gw = g.Floats(gate), uw = g.Floats(up), dw = g.Floats(down);
    std::vector<float> gu(n * d * 2 * ff), dp(n * ff * d);
    for (int64_t e = 0; e < n; ++e) {
      for (int64_t f = 0; f < ff; ++f) {
        for (int64_t k = 0; k < d; ++k) {
          gu[(e * d + k) * 2 * ff + 2 * f] = gw[(e * ff + f) * d + k];
          gu[(e * d + k) * 2 * ff + 2 * f + 1] = uw[(e * ff + f) * d + k];
          dp[(e * ff + f) * d + k] = dw[(e * d + k) * ff + f];
        }
      }
    }
    w.Put(p + "mlp.experts.gate_up_proj", {n, d, 2 * ff}, gu);
    w.Put(p + "mlp.experts.down_proj", {n, ff, d}, dp);
  }
  if (mxfp4) {
    c["quantization_config"] = {{"quant_method", "mxfp4"},
                                {"modules_to_not_convert",
                                 {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                  "model.embed_tokens", "lm_head"}}};
  }
  return c;
}

}  // namespace

Json WriteGgufAsHfCheckpoint(const std::string& gguf_path, const std::filesystem::path& dir) {
  auto file = GgufFile::Open(gguf_path);
  EXPECT_TRUE(file.ok()) << file.status();
  auto spec = ImportGguf(gguf_path);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!file.ok() || !spec.ok()) return {};
  const GgufTensors g(**file);
  const HParams& h = spec->hp;
  Writer w(g);
  w.Copy("model.embed_tokens.weight", "token_embd.weight");
  w.Copy("model.norm.weight", "output_norm.weight");
  if (!h.tied_output) w.Copy("lm_head.weight", "output.weight");
  Json config;
  switch (spec->arch) {
    case Arch::kGlm4Moe:
      config = Glm4Moe(g, h, w);
      break;
    case Arch::kDeepseek2:
      config = Deepseek(g, h, w);
      break;
    case Arch::kGptOss:
      config = GptOss(g, h, w);
      break;
    case Arch::kQwen3Moe:
      config = Qwen3Moe(g, h, w);
      break;
    default:
      ADD_FAILURE() << "no Hugging Face layout for " << ArchName(spec->arch);
      return {};
  }
  WriteCheckpoint(dir, config, w.tensors());
  return config;
}

}  // namespace moe::testing
