#include "lib/model/parts/grouped_query_attention.h"

#include "lib/model/parts/rope_params.h"

namespace moe {

void GroupedQueryAttention::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                                absl::Span<const SequenceChunk> batch, int64_t n, float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::attention_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd, hd = h.head_dim;
  const int64_t q_dim = h.n_head * hd, kv_dim = h.n_head_kv * hd;
  const int32_t* positions = ctx.positions.data();
  xn_.resize(n * d);
  q_.resize(n * q_dim);
  k_.resize(n * kv_dim);
  v_.resize(n * kv_dim);
  att_.resize(n * q_dim);
  o_.resize(n * d);
  be.RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn_.data());
  const WeightView qkv[] = {L.wq, L.wk, L.wv};
  float* const qkv_out[] = {q_.data(), k_.data(), v_.data()};
  be.MatMulShared(qkv, xn_.data(), n, qkv_out);
  if (L.bq) {
    be.AddBias(q_.data(), L.bq, n, q_dim);
    be.AddBias(k_.data(), L.bk, n, kv_dim);
    be.AddBias(v_.data(), L.bv, n, kv_dim);
  }
  if (h.qk_norm == QkNorm::kFull) {
    be.RmsNorm(q_.data(), L.q_norm, n, q_dim, h.rms_eps, q_.data());
    be.RmsNorm(k_.data(), L.k_norm, n, kv_dim, h.rms_eps, k_.data());
  } else if (h.qk_norm == QkNorm::kPerHead) {
    be.RmsNorm(q_.data(), L.q_norm, n * h.n_head, hd, h.rms_eps, q_.data());
    be.RmsNorm(k_.data(), L.k_norm, n * h.n_head_kv, hd, h.rms_eps, k_.data());
  }
  const RopeParams rope = RopeFor(h);
  be.Rope(q_.data(), n, h.n_head, hd, positions, rope);
  be.Rope(k_.data(), n, h.n_head_kv, hd, positions, rope);
  // Each sequence writes its rows into its own cache and attends over it alone.
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    const KvLayerView kv = c.kv->layer(layer);
    be.StoreKv(k_.data() + row * kv_dim, v_.data() + row * kv_dim, m, positions + row, kv);
    be.Attention(q_.data() + row * q_dim, m, h.n_head, positions + row, kv,
                 att_.data() + row * q_dim, AttentionOptions{h.kq_scale, L.parts.window, L.sinks});
    row += m;
  }
  be.MatMul(L.wo, att_.data(), n, o_.data());
  if (L.bo) be.AddBias(o_.data(), L.bo, n, d);
  be.Axpy(1.0f, o_.data(), n * d, x);
}

}  // namespace moe
