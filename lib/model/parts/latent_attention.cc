#include "lib/model/parts/latent_attention.h"

#include <algorithm>

#include "lib/model/parts/rope_params.h"

namespace moe {
namespace {

// Head `h` of a stacked per-head weight [n_head x rows x cols].
WeightView HeadSlice(const WeightView& w, int64_t n_head, int64_t h) {
  WeightView s = w;
  s.rows = w.rows / n_head;
  s.data = w.data + h * s.rows * w.row_bytes();
  return s;
}

// dst[t][0..len) = src[t * src_stride + offset ..], for n rows.
void Gather(const float* src, int64_t src_stride, int64_t offset, int64_t len, int64_t n,
            float* dst) {
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(src + t * src_stride + offset, len, dst + t * len);
  }
}

void Scatter(const float* src, int64_t len, int64_t n, float* dst, int64_t dst_stride,
             int64_t offset) {
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(src + t * len, len, dst + t * dst_stride + offset);
  }
}

}  // namespace

void LatentAttention::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                          absl::Span<const SequenceChunk> batch, int64_t n, float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::attention_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd, heads = h.n_head, r = h.kv_lora_rank, dr = h.rope_dim;
  const int64_t dn = h.qk_nope_dim, dv = h.v_head_dim, dq = dn + dr, dk = r + dr;
  const int32_t* positions = ctx.positions.data();
  xn_.resize(n * d);
  be.RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn_.data());

  // Queries: through the low-rank pair when there is one.
  q_.resize(n * heads * dq);
  if (!L.wq_a.empty()) {
    q_low_.resize(n * h.q_lora_rank);
    be.MatMul(L.wq_a, xn_.data(), n, q_low_.data());
    be.RmsNorm(q_low_.data(), L.q_a_norm, n, h.q_lora_rank, h.rms_eps, q_low_.data());
    be.MatMul(L.wq_b, q_low_.data(), n, q_.data());
  } else {
    be.MatMul(L.wq, xn_.data(), n, q_.data());
  }
  // The cached row: [rmsnorm(latent) ; rope(k_pe)].
  kv_.resize(n * dk);
  be.MatMul(L.wkv_a, xn_.data(), n, kv_.data());
  latent_.resize(n * r);
  Gather(kv_.data(), dk, 0, r, n, latent_.data());
  be.RmsNorm(latent_.data(), L.kv_a_norm, n, r, h.rms_eps, latent_.data());
  Scatter(latent_.data(), r, n, kv_.data(), dk, 0);
  be.Rope(kv_.data(), n, 1, dk, positions, RopeFor(h, r));
  be.Rope(q_.data(), n, heads, dq, positions, RopeFor(h, dn));

  // Each head's query in the latent's space, beside its RoPE part.
  q_abs_.resize(n * heads * dk);
  gather_.resize(n * std::max(dn, r));
  product_.resize(n * std::max(r, dv));
  for (int64_t hh = 0; hh < heads; ++hh) {
    Gather(q_.data(), heads * dq, hh * dq, dn, n, gather_.data());
    be.MatMul(HeadSlice(L.wk_b, heads, hh), gather_.data(), n, product_.data());
    Scatter(product_.data(), r, n, q_abs_.data(), heads * dk, hh * dk);
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(q_.data() + t * heads * dq + hh * dq + dn, dr,
                  q_abs_.data() + t * heads * dk + hh * dk + r);
    }
  }

  // One shared KV head per sequence; a row's values are its latent (the first r of the key).
  att_latent_.resize(n * heads * dk);
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    const KvLayerView kv = c.kv->layer(layer);
    be.StoreKv(kv_.data() + row * dk, kv_.data() + row * dk, m, positions + row, kv);
    be.Attention(q_abs_.data() + row * heads * dk, m, heads, positions + row, kv,
                 att_latent_.data() + row * heads * dk, AttentionOptions{h.kq_scale});
    row += m;
  }

  // Out of the latent, per head, then the output projection.
  att_.resize(n * heads * dv);
  for (int64_t hh = 0; hh < heads; ++hh) {
    Gather(att_latent_.data(), heads * dk, hh * dk, r, n, gather_.data());
    be.MatMul(HeadSlice(L.wv_b, heads, hh), gather_.data(), n, product_.data());
    Scatter(product_.data(), dv, n, att_.data(), heads * dv, hh * dv);
  }
  o_.resize(n * d);
  be.MatMul(L.wo, att_.data(), n, o_.data());
  be.Axpy(1.0f, o_.data(), n * d, x);
}

}  // namespace moe
