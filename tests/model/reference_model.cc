#include "tests/model/reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/model/arch/architecture.h"

namespace moe::testing {
namespace {

using Mat = std::vector<float>;  // row-major

struct Builder {
  ModelSpec spec;
  std::mt19937 rng;
  DType dtype;
  std::shared_ptr<std::vector<std::vector<uint8_t>>> store =
      std::make_shared<std::vector<std::vector<uint8_t>>>();

  void Add(const std::string& name, std::vector<int64_t> shape, float std, float mean = 0,
           int layer = -1, int expert = -1) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::normal_distribution<float> nd(mean, std);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    // Convolution kernels, Mamba-2's grouped norm and its per-head columns (A, D) stay F32, as
    // llama-quantize keeps them.
    const bool kept = name.find("shortconv.conv.") != std::string::npos ||
                      name.find("ssm_conv1d") != std::string::npos ||
                      name.find("ssm_norm") != std::string::npos || shape.back() == 1;
    DType t = shape.size() == 2 && !kept ? dtype : DType::kF32;
    int64_t cols = shape.back();
    std::vector<uint8_t> bytes(RowBytes(t, cols) * (n / cols));
    for (int64_t r = 0; r < n / cols; ++r) {
      (void)QuantizeRow(t, v.data() + r * cols, bytes.data() + r * RowBytes(t, cols), cols);
    }
    store->push_back(std::move(bytes));
    TensorSpec ts;
    ts.name = name;
    ts.dtype = t;
    ts.shape = std::move(shape);
    ts.layer = layer;
    ts.expert = expert;
    ts.data = absl::MakeConstSpan(store->back());
    spec.tensors.push_back(std::move(ts));
  }
};

Mat Weight(const ModelSpec& s, const std::string& name) {
  const TensorSpec* t = s.Find(name);
  Mat m(t->num_elements());
  int64_t cols = t->shape.back();
  for (int64_t r = 0; r < t->num_elements() / cols; ++r) {
    DequantizeRow(t->dtype, t->data.data() + r * RowBytes(t->dtype, cols), m.data() + r * cols,
                  cols);
  }
  return m;
}

// y = W x for W [rows x cols].
std::vector<float> MatVec(const Mat& w, const std::vector<float>& x) {
  size_t cols = x.size(), rows = w.size() / cols;
  std::vector<float> y(rows);
  for (size_t r = 0; r < rows; ++r) {
    double s = 0;
    for (size_t c = 0; c < cols; ++c) s += static_cast<double>(w[r * cols + c]) * x[c];
    y[r] = static_cast<float>(s);
  }
  return y;
}

// An empty w: no weight (Llama 4's L2 norm of q and k).
std::vector<float> RmsNorm(const std::vector<float>& x, const Mat& w, float eps) {
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  double scale = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = static_cast<float>(x[i] * scale * (w.empty() ? 1.f : w[i]));
  }
  return y;
}

// RMSNorm of each hd-long head of vec, in place.
void PerHeadRmsNorm(std::vector<float>& vec, int64_t hd, const Mat& w, float eps) {
  for (size_t off = 0; off < vec.size(); off += hd) {
    std::vector<float> head(vec.begin() + off, vec.begin() + off + hd);
    head = RmsNorm(head, w, eps);
    std::copy(head.begin(), head.end(), vec.begin() + off);
  }
}

// HF's rotate_half convention (NEOX) or GPT-J's interleaved pairs (NORM), on one head; with
// Llama 3's frequency factors each pair's frequency divided by its own.
void Rope(float* v, int64_t dim, int64_t pos, float base, RopeStyle style, const Mat& factors) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    double theta = pos * std::pow(static_cast<double>(base), -2.0 * i / dim);
    if (!factors.empty()) theta /= factors[i];
    int64_t a = style == RopeStyle::kNeox ? i : 2 * i;
    int64_t b = style == RopeStyle::kNeox ? i + dim / 2 : 2 * i + 1;
    double x0 = v[a], x1 = v[b];
    v[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
    v[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

// SwiGLU, or with no gate (g empty) transformers' NemotronHMLP: down(relu(up x)^2).
std::vector<float> Mlp(const ModelSpec& s, const std::string& g, const std::string& u,
                       const std::string& d, const std::vector<float>& x) {
  auto up = MatVec(Weight(s, u), x);
  if (g.empty()) {
    for (float& v : up) v = v > 0 ? v * v : 0.f;
    return MatVec(Weight(s, d), up);
  }
  auto gate = MatVec(Weight(s, g), x);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
  return MatVec(Weight(s, d), gate);
}

// The families whose recurrent layers are gated delta nets.
bool DeltaNets(const RandomModelOptions& o) {
  return o.arch == Arch::kQwen35Moe || o.arch == Arch::kQwen3Next;
}

// What a family requires of a file that a model built in memory still has to say: the keys a
// GGUF of these options would hold (the gating function and LFM2's layer kinds).
class RandomModelKeys final : public MetadataKeys {
 public:
  explicit RandomModelKeys(const RandomModelOptions& o) : o_(o) {}
  absl::StatusOr<int64_t> Int(absl::string_view key, std::optional<int64_t> def) const override {
    if (key == "shortconv.l_cache") return o_.short_conv_kernel;
    if (key == "ssm.conv_kernel") return o_.ssm_conv_kernel;
    // A gated delta net's inner size is its value heads' (qwen35moe).
    if (key == "ssm.inner_size") {
      return DeltaNets(o_) ? o_.ssm_heads * o_.ssm_state : 2 * o_.n_embd;
    }
    if (key == "ssm.state_size") return o_.ssm_state;
    if (key == "ssm.time_step_rank") return o_.ssm_heads;
    if (key == "ssm.group_count") return o_.ssm_groups;
    if (key == "expert_gating_func" && !o_.short_conv_layers.empty()) return 2;
    if (key == "expert_shared_feed_forward_length") return o_.n_ff_shared;
    if (key == "moe_latent_size") return o_.moe_latent;
    return none_.Int(key, def);
  }
  absl::StatusOr<float> Float(absl::string_view key, float def) const override { return def; }
  absl::StatusOr<bool> Bool(absl::string_view key, bool def) const override {
    // Granite-4.0-H's attention layers have no RoPE, as its checkpoints are converted.
    if (key == "rope.scaling.finetuned" && !o_.ssm_layers.empty()) return false;
    return def;
  }
  bool Has(absl::string_view key) const override { return false; }
  absl::StatusOr<std::vector<int64_t>> IntArray(absl::string_view key) const override {
    if (!o_.layer_pattern.empty()) {  // Nemotron-H's, as its converter writes them
      std::vector<int64_t> v;
      for (char c : o_.layer_pattern) {
        if (key == "attention.head_count_kv") v.push_back(c == '*' ? o_.n_head_kv : 0);
        if (key == "feed_forward_length") v.push_back(c == 'E' ? o_.n_ff_expert : 0);
      }
      if (!v.empty()) return v;
    }
    if (key == "rope.dimension_sections") {
      // Sections that cover every rotated pair: for text, plain NEOX RoPE over rope_dim.
      const int64_t pairs = (o_.rope_dim > 0 ? o_.rope_dim : o_.head_dim) / 2;
      return std::vector<int64_t>{pairs - 2 * (pairs / 3), pairs / 3, pairs / 3, 0};
    }
    if (key == "attention.recurrent_layers" && DeltaNets(o_)) {
      std::vector<int64_t> recurrent(o_.n_layer, 0);
      for (int64_t l : o_.ssm_layers) recurrent[l] = 1;
      return recurrent;
    }
    if (key != "attention.head_count_kv") return none_.IntArray(key);
    std::vector<int64_t> kv(o_.n_layer, o_.n_head_kv);
    for (int64_t l : o_.short_conv_layers) kv[l] = 0;
    for (int64_t l : o_.ssm_layers) kv[l] = 0;
    return kv;
  }

 private:
  const RandomModelOptions& o_;
  NoMetadata none_;
};

// LFM2's gated short convolution for every position of one layer, as transformers'
// Lfm2MoeShortConv computes it: B, C and x from in_proj, B * x convolved causally per channel
// over the last `kernel` positions (zeros before the first), gated by C, then out_proj.
std::vector<std::vector<float>> ShortConv(const ModelSpec& s, int l,
                                          const std::vector<std::vector<float>>& xn,
                                          int64_t kernel) {
  auto n = [&](const char* base) { return LayerTensorName(l, base); };
  const Mat in_proj = Weight(s, n("shortconv.in_proj")), conv = Weight(s, n("shortconv.conv")),
            out_proj = Weight(s, n("shortconv.out_proj"));
  const int64_t T = xn.size(), E = s.hp.n_embd;
  std::vector<std::vector<float>> bx(T), c(T), out(T);
  for (int64_t t = 0; t < T; ++t) {
    const auto bcx = MatVec(in_proj, xn[t]);
    bx[t].resize(E);
    for (int64_t i = 0; i < E; ++i) bx[t][i] = bcx[i] * bcx[2 * E + i];
    c[t].assign(bcx.begin() + E, bcx.begin() + 2 * E);
  }
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> y(E);
    for (int64_t i = 0; i < E; ++i) {
      double sum = 0;
      for (int64_t k = 0; k < kernel; ++k) {
        const int64_t p = t - (kernel - 1) + k;
        if (p >= 0) sum += static_cast<double>(conv[i * kernel + k]) * bx[p][i];
      }
      y[i] = static_cast<float>(c[t][i] * sum);
    }
    out[t] = MatVec(out_proj, y);
  }
  return out;
}

// A Mamba-2 mixer for every position of one layer, as transformers' GraniteMoeHybridMambaLayer
// computes it without its kernels (torch_forward, one token after another): z, xBC and dt from
// in_proj; xBC convolved causally per channel with the bias, then SiLU, split into x, B and C;
// per head, dt = softplus(dt + dt_bias), the state decays by exp(dt A) and takes dt x B; y =
// C . state + D x; then the gated RMSNorm per group (norm(y * silu(z))) and out_proj.
std::vector<std::vector<float>> Mamba2(const ModelSpec& s, int l,
                                       const std::vector<std::vector<float>>& xn) {
  const HParams& h = s.hp;
  auto n = [&](const char* base) { return LayerTensorName(l, base); };
  const Mat in_proj = Weight(s, n("ssm_in")), conv = Weight(s, n("ssm_conv1d")),
            conv_b = Weight(s, LayerBiasName(l, "ssm_conv1d")),
            dt_b = Weight(s, LayerBiasName(l, "ssm_dt")), a = Weight(s, LayerBareName(l, "ssm_a")),
            d = Weight(s, LayerBareName(l, "ssm_d")), norm = Weight(s, n("ssm_norm")),
            out_proj = Weight(s, n("ssm_out"));
  const int64_t T = xn.size(), I = h.ssm_inner, N = h.ssm_state, H = h.ssm_heads, G = h.ssm_groups,
                P = I / H, C = I + 2 * G * N, K = h.ssm_conv_kernel;
  std::vector<std::vector<float>> zxbcdt(T), out(T);
  for (int64_t t = 0; t < T; ++t) zxbcdt[t] = MatVec(in_proj, xn[t]);
  std::vector<double> state(H * P * N, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> xbc(C);
    for (int64_t c = 0; c < C; ++c) {
      double sum = conv_b[c];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t p = t - (K - 1) + k;
        if (p >= 0) sum += static_cast<double>(conv[c * K + k]) * zxbcdt[p][I + c];
      }
      xbc[c] = sum / (1 + std::exp(-sum));
    }
    std::vector<double> y(I);
    for (int64_t hh = 0; hh < H; ++hh) {
      const int64_t g = hh / (H / G);
      const double raw = zxbcdt[t][I + C + hh] + double{dt_b[hh]};
      const double dt = raw > 20 ? raw : std::log1p(std::exp(raw));
      const double decay = std::exp(dt * a[hh]);
      for (int64_t i = 0; i < P; ++i) {
        const double x = xbc[hh * P + i];
        double sum = 0;
        for (int64_t j = 0; j < N; ++j) {
          double& st = state[(hh * P + i) * N + j];
          st = st * decay + dt * x * xbc[I + g * N + j];
          sum += st * xbc[I + G * N + g * N + j];
        }
        y[hh * P + i] = sum + d[hh] * x;
      }
    }
    std::vector<float> gated(I);
    for (int64_t i = 0; i < I; ++i) {
      const double z = zxbcdt[t][i];
      gated[i] = static_cast<float>(y[i] * z / (1 + std::exp(-z)));
    }
    for (int64_t g = 0; g < G; ++g) {
      const std::vector<float> part(gated.begin() + g * (I / G), gated.begin() + (g + 1) * (I / G));
      const Mat w(norm.begin() + g * (I / G), norm.begin() + (g + 1) * (I / G));
      const auto normed = RmsNorm(part, w, h.rms_eps);
      std::copy(normed.begin(), normed.end(), gated.begin() + g * (I / G));
    }
    out[t] = MatVec(out_proj, gated);
  }
  return out;
}

// A gated delta net for every position of one layer, as transformers' Qwen3_5MoeGatedDeltaNet
// computes it without its kernels (torch_recurrent_gated_delta_rule, one token after another):
// q, k and v from in_proj_qkv (attn_qkv), convolved causally per channel without bias, then
// SiLU; q and k L2-normalised per head (x / sqrt(sum x^2 + 1e-6)), q scaled by 1 / sqrt(size);
// per value head, g = A softplus(alpha + dt_bias) (A = -exp(A_log), as the file stores it), the
// state decays by exp(g), kv_mem = S^T k, S += k ((v - kv_mem) sigmoid(beta))^T, y = S^T q; then
// RMSNorm(y) x weight x silu(z) per head and out_proj. transformers repeats each key head over
// its value heads in turn (repeat_interleave); llama.cpp's converter reorders the value heads so
// that value head h reads key head h mod key heads, and qwen35moe's weights are in that order;
// Qwen3-Next's files keep transformers' (h / (value heads / key heads)) and take beta and alpha
// from one matrix, ssm_ba, per key head its value heads' betas then their alphas
// (Qwen3NextGatedDeltaNet's in_proj_ba, which llama.cpp's converter keeps as it is).
std::vector<std::vector<float>> GatedDeltaNet(const ModelSpec& s, int l,
                                              const std::vector<std::vector<float>>& xn) {
  const HParams& h = s.hp;
  auto n = [&](const char* base) { return LayerTensorName(l, base); };
  const bool next = h.ssm_grouped_heads;
  const Mat qkv_w = Weight(s, n("attn_qkv")), z_w = Weight(s, n("attn_gate")),
            beta_w = Weight(s, n(next ? "ssm_ba" : "ssm_beta")),
            alpha_w = next ? Mat() : Weight(s, n("ssm_alpha")), conv = Weight(s, n("ssm_conv1d")),
            dt_b = Weight(s, LayerBiasName(l, "ssm_dt")), a = Weight(s, LayerBareName(l, "ssm_a")),
            norm = Weight(s, n("ssm_norm")), out_proj = Weight(s, n("ssm_out"));
  const int64_t T = xn.size(), S = h.ssm_state, HV = h.ssm_heads, HK = h.ssm_groups,
                C = h.ssm_conv_channels(), K = h.ssm_conv_kernel;
  std::vector<std::vector<float>> qkv(T), out(T);
  for (int64_t t = 0; t < T; ++t) qkv[t] = MatVec(qkv_w, xn[t]);
  auto l2norm = [](std::vector<double> x) {
    double sum = 0;
    for (double v : x) sum += v * v;
    for (double& v : x) v /= std::sqrt(sum + 1e-6);
    return x;
  };
  std::vector<double> state(HV * S * S, 0.0);  // [head][key i][value j]
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> mixed(C);
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t p = t - (K - 1) + k;
        if (p >= 0) sum += static_cast<double>(conv[c * K + k]) * qkv[p][c];
      }
      mixed[c] = sum / (1 + std::exp(-sum));
    }
    std::vector<float> beta_raw = MatVec(beta_w, xn[t]), alpha_raw(HV);
    if (next) {  // [key head][beta x r, alpha x r]
      const int64_t r = HV / HK;
      const std::vector<float> ba = beta_raw;
      for (int64_t hh = 0; hh < HV; ++hh) {
        beta_raw[hh] = ba[(hh / r) * 2 * r + hh % r];
        alpha_raw[hh] = ba[(hh / r) * 2 * r + r + hh % r];
      }
      beta_raw.resize(HV);
    } else {
      alpha_raw = MatVec(alpha_w, xn[t]);
    }
    std::vector<float> y(HV * S);
    for (int64_t hh = 0; hh < HV; ++hh) {
      const int64_t kh = next ? hh / (HV / HK) : hh % HK;
      auto q = l2norm(std::vector<double>(mixed.begin() + kh * S, mixed.begin() + (kh + 1) * S));
      const auto k = l2norm(
          std::vector<double>(mixed.begin() + (HK + kh) * S, mixed.begin() + (HK + kh + 1) * S));
      for (double& v : q) v /= std::sqrt(static_cast<double>(S));
      const double* v = mixed.data() + 2 * HK * S + hh * S;
      const double raw = double{alpha_raw[hh]} + dt_b[hh];
      const double g = a[hh] * (raw > 20 ? raw : std::log1p(std::exp(raw)));
      const double beta = 1 / (1 + std::exp(-double{beta_raw[hh]}));
      double* st = state.data() + hh * S * S;
      for (double& z : std::span<double>(st, S * S)) z *= std::exp(g);
      for (int64_t j = 0; j < S; ++j) {
        double kv_mem = 0;
        for (int64_t i = 0; i < S; ++i) kv_mem += st[i * S + j] * k[i];
        const double delta = (v[j] - kv_mem) * beta;
        for (int64_t i = 0; i < S; ++i) st[i * S + j] += k[i] * delta;
      }
      std::vector<float> head(S);
      for (int64_t j = 0; j < S; ++j) {
        double sum = 0;
        for (int64_t i = 0; i < S; ++i) sum += st[i * S + j] * q[i];
        head[j] = static_cast<float>(sum);
      }
      head = RmsNorm(head, norm, h.rms_eps);
      std::copy(head.begin(), head.end(), y.begin() + hh * S);
    }
    const auto z = MatVec(z_w, xn[t]);
    for (int64_t i = 0; i < HV * S; ++i)
      y[i] = static_cast<float>(y[i] * z[i] / (1 + std::exp(-double{z[i]})));
    out[t] = MatVec(out_proj, y);
  }
  return out;
}

// Hugging Face's Ernie4_5_Moe rule, which reduces to "every layer" for the other families.
bool HasExperts(int64_t n_layer_dense, int64_t moe_layer_step, int l) {
  return l >= n_layer_dense && (l + 1) % moe_layer_step == 0;
}

// One grouped-query attention layer's tensors, with the biases and QK-norm the family has (in
// the order every model was drawn in before convolution layers: the same seed, the same model).
void AddAttention(Builder& b, const HParams& h, const RandomModelOptions& o, int l) {
  auto n = [&](const char* base) { return LayerTensorName(l, base); };
  const int64_t E = o.n_embd, q_dim = o.n_head * o.head_dim, kv_dim = o.n_head_kv * o.head_dim;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(E));
  // Qwen3.5's attn_q: each head's q rows, then its output gate's.
  b.Add(n("attn_q"), {h.attention_output_gate ? 2 * q_dim : q_dim, E}, in_std, 0, l);
  b.Add(n("attn_k"), {kv_dim, E}, in_std, 0, l);
  b.Add(n("attn_v"), {kv_dim, E}, in_std, 0, l);
  b.Add(n("attn_output"), {E, q_dim}, 0.5f / std::sqrt(static_cast<float>(q_dim)), 0, l);
  if (h.has_qkv_bias) {
    b.Add(absl::StrCat("blk.", l, ".attn_q.bias"), {q_dim}, 0.1f, 0, l);
    b.Add(absl::StrCat("blk.", l, ".attn_k.bias"), {kv_dim}, 0.1f, 0, l);
    b.Add(absl::StrCat("blk.", l, ".attn_v.bias"), {kv_dim}, 0.1f, 0, l);
  }
  if (h.qk_norm == QkNorm::kFull) {
    b.Add(n("attn_q_norm"), {q_dim}, 0.05f, 1.0f, l);
    b.Add(n("attn_k_norm"), {kv_dim}, 0.05f, 1.0f, l);
  } else if (h.qk_norm == QkNorm::kPerHead || h.qk_norm == QkNorm::kPerHeadAfterRope) {
    b.Add(n("attn_q_norm"), {o.head_dim}, 0.05f, 1.0f, l);
    b.Add(n("attn_k_norm"), {o.head_dim}, 0.05f, 1.0f, l);
  }
}

}  // namespace

ModelSpec MakeRandomModel(const RandomModelOptions& o) {
  Builder b;
  b.rng.seed(o.seed);
  b.dtype = o.dtype;
  ModelSpec& s = b.spec;
  s.arch = o.arch;
  s.name = absl::StrCat("random-", ArchName(o.arch));
  HParams& h = s.hp;
  // What the family implies, as for a file that says nothing more than its sizes.
  h.n_layer = o.n_layer;
  h.n_expert = o.n_expert;
  h.n_ff_expert = o.n_ff_expert;
  const absl::Status implied = ArchitectureOf(o.arch).ReadMetadata(RandomModelKeys(o), &h);
  if (!implied.ok()) {
    std::fprintf(stderr, "MakeRandomModel: %s\n", implied.ToString().c_str());
    std::abort();
  }
  h.n_vocab = o.n_vocab;
  h.n_embd = o.n_embd;
  h.n_head = o.n_head;
  h.n_head_kv = o.n_head_kv;
  h.head_dim = o.head_dim;
  h.rope_dim = o.rope_dim > 0 ? o.rope_dim : o.head_dim;
  if (o.qk_norm) h.qk_norm = *o.qk_norm;
  h.n_expert_groups = o.expert_groups;
  h.n_group_used = o.expert_groups_used;
  if (o.norm_topk_prob) h.norm_topk_prob = *o.norm_topk_prob;
  h.routed_scale = o.routed_scale;
  h.n_ctx_train = 128;
  h.n_expert_used = o.n_expert_used;
  h.n_ff_shared = o.n_ff_shared;
  h.rms_eps = 1e-6f;
  h.rope_freq_base = 10000.f;
  h.shared_expert_gate = h.shared_expert_gate && o.n_ff_shared > 0;
  h.tied_output = o.tied_output;
  h.n_layer_dense = o.n_layer_dense;
  h.n_ff_dense = o.n_ff_dense;
  h.moe_layer_step = o.moe_layer_step;
  h.has_selection_bias = o.selection_bias;
  h.embedding_scale = o.embedding_scale;
  h.residual_scale = o.residual_scale;
  h.logit_scale = o.logit_scale;
  h.kq_scale = o.attention_scale;
  h.short_conv_kernel = o.short_conv_layers.empty() ? 0 : o.short_conv_kernel;
  h.short_conv_layers = o.short_conv_layers;
  if (o.ssm_layers.empty() && o.layer_pattern.empty()) {
    h.ssm_layers.clear();
    h.ssm_conv_kernel = h.ssm_inner = h.ssm_state = h.ssm_heads = h.ssm_groups = 0;
  }
  if (o.attention_chunk > 0) h.sliding_window = o.attention_chunk;
  if (o.temperature_floor > 0) h.attn_temp_floor = o.temperature_floor;
  const int64_t E = o.n_embd;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(E));
  b.Add("token_embd.weight", {o.n_vocab, E}, 1.0f);
  b.Add(std::string(ArchitectureOf(o.arch).output_norm()), {E}, 0.05f, 1.0f);
  if (!o.tied_output) b.Add("output.weight", {o.n_vocab, E}, 2 * in_std);
  if (o.rope_freq_factors) b.Add(std::string(kRopeFreqsTensor), {o.head_dim / 2}, 0.5f, 3.0f);
  for (int l = 0; l < o.n_layer; ++l) {
    auto n = [&](const char* base) { return LayerTensorName(l, base); };
    b.Add(n("attn_norm"), {E}, 0.05f, 1.0f, l);
    if (h.layer_short_conv(l)) {
      const int64_t L = h.short_conv_kernel;
      b.Add(n("shortconv.conv"), {E, L}, 1.0f / std::sqrt(static_cast<float>(L)), 0, l);
      b.Add(n("shortconv.in_proj"), {3 * E, E}, in_std, 0, l);
      b.Add(n("shortconv.out_proj"), {E, E}, 0.5f * in_std, 0, l);
    } else if (h.layer_ssm(l) && DeltaNets(o)) {
      const int64_t I = h.ssm_inner, H = h.ssm_heads, C = h.ssm_conv_channels();
      const int64_t K = h.ssm_conv_kernel;
      b.Add(n("attn_qkv"), {C, E}, in_std, 0, l);
      b.Add(n("attn_gate"), {I, E}, in_std, 0, l);
      b.Add(n("ssm_conv1d"), {C, K}, 1.0f / std::sqrt(static_cast<float>(K)), 0, l);
      // A slow decay (softplus(alpha - 2) ~ 0.1, A ~ -0.5) so the state carries far.
      b.Add(LayerBiasName(l, "ssm_dt"), {H}, 0.5f, -2.f, l);
      b.Add(LayerBareName(l, "ssm_a"), {H}, 0.1f, -0.5f, l);
      if (h.ssm_grouped_heads) {
        b.Add(n("ssm_ba"), {2 * H, E}, in_std, 0, l);
      } else {
        b.Add(n("ssm_beta"), {H, E}, in_std, 0, l);
        b.Add(n("ssm_alpha"), {H, E}, in_std, 0, l);
      }
      b.Add(n("ssm_norm"), {h.ssm_state}, 0.05f, 1.0f, l);
      b.Add(n("ssm_out"), {E, I}, 0.5f / std::sqrt(static_cast<float>(I)), 0, l);
    } else if (h.layer_ssm(l)) {
      const int64_t I = h.ssm_inner, H = h.ssm_heads, G = h.ssm_groups, C = h.ssm_conv_channels();
      const int64_t K = h.ssm_conv_kernel;
      b.Add(n("ssm_in"), {I + C + H, E}, in_std, 0, l);
      b.Add(n("ssm_conv1d"), {C, K}, 1.0f / std::sqrt(static_cast<float>(K)), 0, l);
      b.Add(LayerBiasName(l, "ssm_conv1d"), {C}, 0.1f, 0, l);
      // A slow decay (dt ~ 0.1, A ~ -0.5) so the state carries far.
      b.Add(LayerBiasName(l, "ssm_dt"), {H}, 0.5f, -2.f, l);
      b.Add(LayerBareName(l, "ssm_a"), {H, 1}, 0.1f, -0.5f, l);
      b.Add(LayerBareName(l, "ssm_d"), {H, 1}, 0.1f, 1.f, l);
      b.Add(n("ssm_norm"), {G, I / G}, 0.05f, 1.0f, l);
      b.Add(n("ssm_out"), {E, I}, 0.5f / std::sqrt(static_cast<float>(I)), 0, l);
    } else if (!h.layer_ffn_only(l)) {
      AddAttention(b, h, o, l);
    }
    if (h.layer_mixer_only(l)) continue;
    const std::string ffn_norm(ArchitectureOf(o.arch).Layer(h, l).ffn_norm);
    if (!h.layer_ffn_only(l)) b.Add(n(ffn_norm.c_str()), {E}, 0.05f, 1.0f, l);
    if (!HasExperts(o.n_layer_dense, o.moe_layer_step, l)) {
      b.Add(n("ffn_gate"), {o.n_ff_dense, E}, in_std, 0, l);
      b.Add(n("ffn_up"), {o.n_ff_dense, E}, in_std, 0, l);
      b.Add(n("ffn_down"), {E, o.n_ff_dense}, 0.5f / std::sqrt(float(o.n_ff_dense)), 0, l);
      continue;
    }
    b.Add(n("ffn_gate_inp"), {o.n_expert, E}, 2 * in_std, 0, l);
    // Of the size of the scores (~1 / n_expert), so that it changes choices.
    if (o.selection_bias) b.Add(LayerBiasName(l, "exp_probs_b"), {o.n_expert}, 0.3f, 0, l);
    const int64_t X = h.expert_dim();  // the routed experts' rows
    if (o.moe_latent > 0) {
      b.Add(n("ffn_latent_down"), {X, E}, in_std * std::sqrt(static_cast<float>(E) / X), 0, l);
      b.Add(n("ffn_latent_up"), {E, X}, 1.0f / std::sqrt(static_cast<float>(X)), 0, l);
    }
    for (int e = 0; e < o.n_expert; ++e) {
      // An ungated block's up rows twice as large: relu^2 of unit inputs is small.
      if (h.relu_squared_ffn) {
        b.Add(ExpertTensorName(l, e, "ffn_up"), {o.n_ff_expert, X},
              2.0f / std::sqrt(static_cast<float>(X)), 0, l, e);
        b.Add(ExpertTensorName(l, e, "ffn_down"), {X, o.n_ff_expert},
              0.5f / std::sqrt(static_cast<float>(o.n_ff_expert)), 0, l, e);
        continue;
      }
      b.Add(ExpertTensorName(l, e, "ffn_gate"), {o.n_ff_expert, E}, in_std, 0, l, e);
      b.Add(ExpertTensorName(l, e, "ffn_up"), {o.n_ff_expert, E}, in_std, 0, l, e);
      b.Add(ExpertTensorName(l, e, "ffn_down"), {E, o.n_ff_expert},
            0.5f / std::sqrt(static_cast<float>(o.n_ff_expert)), 0, l, e);
    }
    if (o.n_ff_shared > 0) {
      if (!h.relu_squared_ffn) b.Add(n("ffn_gate_shexp"), {o.n_ff_shared, E}, in_std, 0, l);
      b.Add(n("ffn_up_shexp"), {o.n_ff_shared, E}, (h.relu_squared_ffn ? 2 : 1) * in_std, 0, l);
      b.Add(n("ffn_down_shexp"), {E, o.n_ff_shared}, 0.5f / std::sqrt(float(o.n_ff_shared)), 0, l);
      if (h.shared_expert_gate) b.Add(n("ffn_gate_inp_shexp"), {E}, in_std, 0, l);
    }
  }
  s.owners.push_back(b.store);
  return std::move(b.spec);
}

std::vector<float> ReferenceForward(const ModelSpec& s, const std::vector<int32_t>& tokens) {
  const HParams& h = s.hp;
  const int64_t T = tokens.size(), E = h.n_embd, hd = h.head_dim;
  Mat emb = Weight(s, "token_embd.weight");
  const Mat rope_factors =
      s.Find(kRopeFreqsTensor) != nullptr ? Weight(s, std::string(kRopeFreqsTensor)) : Mat();
  std::vector<std::vector<float>> x(T);
  for (int64_t t = 0; t < T; ++t)
    x[t].assign(emb.begin() + tokens[t] * E, emb.begin() + (tokens[t] + 1) * E);
  for (auto& row : x) {
    for (float& v : row) v *= h.embedding_scale;
  }
  for (int l = 0; l < h.n_layer; ++l) {
    auto n = [&](const char* base) { return LayerTensorName(l, base); };
    // A Nemotron-H layer of its feed-forward part alone, normed by attn_norm.
    const bool ffn_only = h.layer_ffn_only(l);
    if (ffn_only) {
      // no mixer
    } else if (h.layer_short_conv(l) || h.layer_ssm(l)) {
      const Mat conv_norm = Weight(s, n("attn_norm"));
      std::vector<std::vector<float>> xn(T);
      for (int64_t t = 0; t < T; ++t) xn[t] = RmsNorm(x[t], conv_norm, h.rms_eps);
      const auto y = !h.layer_ssm(l) ? ShortConv(s, l, xn, h.short_conv_kernel)
                     : ArchitectureOf(s.arch).Layer(h, l).attention == AttentionPart::kGatedDeltaNet
                         ? GatedDeltaNet(s, l, xn)
                         : Mamba2(s, l, xn);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < E; ++i) x[t][i] += h.residual_scale * y[t][i];
      }
    } else {
      Mat attn_norm = Weight(s, n("attn_norm")), wq = Weight(s, n("attn_q")),
          wk = Weight(s, n("attn_k")), wv = Weight(s, n("attn_v")),
          wo = Weight(s, n("attn_output"));
      std::vector<std::vector<float>> q(T), k(T), v(T), gates(T);
      for (int64_t t = 0; t < T; ++t) {
        auto xn = RmsNorm(x[t], attn_norm, h.rms_eps);
        q[t] = MatVec(wq, xn);
        if (h.attention_output_gate) {  // per head q then its gate: keep q, gates aside
          gates[t].resize(h.n_head * hd);
          std::vector<float> q_only(h.n_head * hd);
          for (int64_t hh = 0; hh < h.n_head; ++hh) {
            std::copy_n(q[t].begin() + 2 * hh * hd, hd, q_only.begin() + hh * hd);
            std::copy_n(q[t].begin() + (2 * hh + 1) * hd, hd, gates[t].begin() + hh * hd);
          }
          q[t] = q_only;
        }
        k[t] = MatVec(wk, xn);
        v[t] = MatVec(wv, xn);
        if (h.has_qkv_bias) {
          Mat bq = Weight(s, absl::StrCat("blk.", l, ".attn_q.bias")),
              bk = Weight(s, absl::StrCat("blk.", l, ".attn_k.bias")),
              bv = Weight(s, absl::StrCat("blk.", l, ".attn_v.bias"));
          for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += bq[i];
          for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += bk[i], v[t][i] += bv[i];
        }
        if (h.qk_norm == QkNorm::kFull) {
          q[t] = RmsNorm(q[t], Weight(s, n("attn_q_norm")), h.rms_eps);
          k[t] = RmsNorm(k[t], Weight(s, n("attn_k_norm")), h.rms_eps);
        } else if (h.qk_norm == QkNorm::kPerHead) {
          PerHeadRmsNorm(q[t], hd, Weight(s, n("attn_q_norm")), h.rms_eps);
          PerHeadRmsNorm(k[t], hd, Weight(s, n("attn_k_norm")), h.rms_eps);
        }
        if (!h.layer_uses_rope(l)) {
          // Llama 4's NoPE layers: transformers' attn_scales, log(floor((p + 1) / floor_scale) +
          // 1) * attn_scale + 1, on the queries.
          if (h.attn_temp_scale != 0.f) {
            const double scale = std::log(std::floor((t + static_cast<double>(h.attn_temp_offset)) /
                                                     static_cast<double>(h.attn_temp_floor)) +
                                          1.0) *
                                     h.attn_temp_scale +
                                 1.0;
            for (float& z : q[t]) z = static_cast<float>(z * scale);
          }
          continue;
        }
        // Partial RoPE turns the first rope_dim of each head, its frequencies over rope_dim.
        for (int64_t hh = 0; hh < h.n_head; ++hh)
          Rope(q[t].data() + hh * hd, h.rope_dim, t, h.rope_freq_base, h.rope_style, rope_factors);
        for (int64_t hh = 0; hh < h.n_head_kv; ++hh)
          Rope(k[t].data() + hh * hd, h.rope_dim, t, h.rope_freq_base, h.rope_style, rope_factors);
        if (h.qk_norm == QkNorm::kPerHeadUnweighted) {  // Llama4TextL2Norm, after RoPE
          PerHeadRmsNorm(q[t], hd, Mat(), h.rms_eps);
          PerHeadRmsNorm(k[t], hd, Mat(), h.rms_eps);
        } else if (h.qk_norm == QkNorm::kPerHeadAfterRope) {  // HunYuan's, after RoPE
          PerHeadRmsNorm(q[t], hd, Weight(s, n("attn_q_norm")), h.rms_eps);
          PerHeadRmsNorm(k[t], hd, Weight(s, n("attn_k_norm")), h.rms_eps);
        }
      }
      std::vector<std::vector<float>> h_attn(T);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> att(h.n_head * hd, 0.f);
        for (int64_t hh = 0; hh < h.n_head; ++hh) {
          int64_t kvh = hh / (h.n_head / h.n_head_kv);
          // Sliding layers see their window, or with chunks the positions of their chunk.
          int64_t first = 0;
          if (h.layer_slides(l)) {
            const int64_t w = h.sliding_window;
            first = h.window_chunked ? t - t % w : std::max<int64_t>(0, t - w + 1);
          }
          std::vector<double> sc(t + 1, -1e300);
          double mx = -1e300;
          for (int64_t p = first; p <= t; ++p) {
            double d = 0;
            for (int64_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[p][kvh * hd + i];
            sc[p] = h.kq_scale != 0 ? d * h.kq_scale : d / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, sc[p]);
          }
          double sum = 0;
          for (auto& z : sc) sum += z = std::exp(z - mx);
          for (int64_t p = first; p <= t; ++p) {
            for (int64_t i = 0; i < hd; ++i)
              att[hh * hd + i] += static_cast<float>(sc[p] / sum * v[p][kvh * hd + i]);
          }
        }
        if (h.attention_output_gate) {  // transformers' attn_output * sigmoid(gate)
          for (size_t i = 0; i < att.size(); ++i) att[i] /= 1 + std::exp(-gates[t][i]);
        }
        auto o = MatVec(wo, att);
        for (int64_t i = 0; i < E; ++i) x[t][i] += h.residual_scale * o[i];
      }
    }
    if (h.layer_mixer_only(l)) continue;
    const std::string ffn_norm_name(ArchitectureOf(s.arch).Layer(h, l).ffn_norm);
    Mat ffn_norm = Weight(s, n(ffn_only ? "attn_norm" : ffn_norm_name.c_str()));
    if (!HasExperts(h.n_layer_dense, h.moe_layer_step, l)) {
      for (int64_t t = 0; t < T; ++t) {
        auto y =
            Mlp(s, n("ffn_gate"), n("ffn_up"), n("ffn_down"), RmsNorm(x[t], ffn_norm, h.rms_eps));
        for (int64_t i = 0; i < E; ++i) x[t][i] += h.residual_scale * y[i];
      }
      continue;
    }
    Mat router = Weight(s, n("ffn_gate_inp"));
    const Mat selection_bias =
        h.has_selection_bias ? Weight(s, LayerBiasName(l, "exp_probs_b")) : Mat();
    for (int64_t t = 0; t < T; ++t) {
      auto xn = RmsNorm(x[t], ffn_norm, h.rms_eps);
      auto logits = MatVec(router, xn);
      std::vector<double> p(h.n_expert);
      if (h.gating == Gating::kSigmoid) {
        for (int64_t e = 0; e < h.n_expert; ++e) p[e] = 1 / (1 + std::exp(-double{logits[e]}));
      } else {
        double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
        for (int64_t e = 0; e < h.n_expert; ++e) sum += p[e] = std::exp(logits[e] - mx);
        for (auto& z : p) z /= sum;
      }
      std::vector<int> idx(h.n_expert);
      std::iota(idx.begin(), idx.end(), 0);
      std::vector<double> rank = p;
      for (size_t e = 0; e < selection_bias.size(); ++e) rank[e] += selection_bias[e];
      if (h.n_expert_groups > 1) {
        // transformers' group-limited top-k (DeepSeek-V3, Ling 2.0): a group scores the sum of
        // its two best ranks; the experts outside the best n_group_used groups are not chosen.
        const int64_t per = h.n_expert / h.n_expert_groups;
        std::vector<std::pair<double, int64_t>> groups;
        for (int64_t g = 0; g < h.n_expert_groups; ++g) {
          std::vector<double> r(rank.begin() + g * per, rank.begin() + (g + 1) * per);
          std::sort(r.rbegin(), r.rend());
          groups.push_back({r[0] + (per > 1 ? r[1] : 0.0), g});
        }
        std::stable_sort(groups.begin(), groups.end(),
                         [](const auto& a, const auto& b) { return a.first > b.first; });
        for (int64_t j = h.n_group_used; j < h.n_expert_groups; ++j) {
          const int64_t g = groups[j].second;
          for (int64_t e = g * per; e < (g + 1) * per; ++e) rank[e] = -1e300;
        }
      }
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return rank[a] > rank[b]; });
      double chosen = 0;
      for (int64_t j = 0; j < h.n_expert_used; ++j) chosen += p[idx[j]];
      // Nemotron 3 Super's latent experts: their input projected down, their sum projected up.
      const bool latent = h.moe_latent_dim > 0;
      const std::vector<float> expert_in =
          latent ? MatVec(Weight(s, n("ffn_latent_down")), xn) : xn;
      std::vector<float> out(h.expert_dim(), 0.f);
      for (int64_t j = 0; j < h.n_expert_used; ++j) {
        int e = idx[j];
        double w = (h.norm_topk_prob ? p[e] / chosen : p[e]) * h.routed_scale;
        // Llama 4 weighs the expert's input (transformers' routed_in = hidden * router_scores)
        // and adds its output as it is.
        std::vector<float> in = expert_in;
        if (h.expert_input_weighted) {
          for (float& z : in) z = static_cast<float>(z * w);
          w = 1;
        }
        auto y = Mlp(s, h.relu_squared_ffn ? "" : ExpertTensorName(l, e, "ffn_gate"),
                     ExpertTensorName(l, e, "ffn_up"), ExpertTensorName(l, e, "ffn_down"), in);
        for (size_t i = 0; i < out.size(); ++i) out[i] += static_cast<float>(w * y[i]);
      }
      if (latent) out = MatVec(Weight(s, n("ffn_latent_up")), out);
      if (h.n_ff_shared > 0) {
        auto y = Mlp(s, h.relu_squared_ffn ? "" : n("ffn_gate_shexp"), n("ffn_up_shexp"),
                     n("ffn_down_shexp"), xn);
        double g = 1;
        if (h.shared_expert_gate) {
          double z = MatVec(Weight(s, n("ffn_gate_inp_shexp")), xn)[0];
          g = 1 / (1 + std::exp(-z));
        }
        for (int64_t i = 0; i < E; ++i) out[i] += static_cast<float>(g * y[i]);
      }
      for (int64_t i = 0; i < E; ++i) x[t][i] += h.residual_scale * out[i];
    }
  }
  Mat out_norm = Weight(s, std::string(ArchitectureOf(s.arch).output_norm()));
  Mat head = Weight(s, h.tied_output ? "token_embd.weight" : "output.weight");
  std::vector<float> logits;
  for (int64_t t = 0; t < T; ++t) {
    auto y = MatVec(head, RmsNorm(x[t], out_norm, h.rms_eps));
    for (float& v : y) v /= h.logit_scale;
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

}  // namespace moe::testing
