#include "lib/model/parts/grouped_query_attention.h"

#include "lib/base/status_macros.h"
#include "lib/model/parts/rope_params.h"
#include "lib/model/parts/sequence_attention.h"

namespace moe {

absl::Status GroupedQueryAttention::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                                        absl::Span<const SequenceChunk> batch, int64_t n,
                                        float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::attention_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd, hd = h.head_dim;
  const int64_t q_dim = h.n_head * hd, kv_dim = h.n_head_kv * hd;
  const int32_t* positions = ctx.positions.data();
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, n * d));
  MOE_ASSIGN_OR_RETURN(float* q, q_.Resize(be, n * q_dim));
  MOE_ASSIGN_OR_RETURN(float* k, k_.Resize(be, n * kv_dim));
  MOE_ASSIGN_OR_RETURN(float* v, v_.Resize(be, n * kv_dim));
  MOE_ASSIGN_OR_RETURN(float* att, att_.Resize(be, n * q_dim));
  MOE_ASSIGN_OR_RETURN(float* o, o_.Resize(be, n * d));
  const WeightView qkv[] = {L.wq, L.wk, L.wv};
  be.PrefetchProducts(qkv, n);
  be.RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn);
  float* const qkv_out[] = {q, k, v};
  const float* const qkv_bias[] = {L.bq, L.bk, L.bv};
  be.MatMulShared(qkv, xn, n, qkv_out, qkv_bias);
  be.PrefetchProducts({&L.wo, 1}, n);
  if (h.qk_norm == QkNorm::kFull) {
    be.RmsNorm(q, L.q_norm, n, q_dim, h.rms_eps, q);
    be.RmsNorm(k, L.k_norm, n, kv_dim, h.rms_eps, k);
  } else if (h.qk_norm == QkNorm::kPerHead) {
    be.RmsNorm(q, L.q_norm, n * h.n_head, hd, h.rms_eps, q);
    be.RmsNorm(k, L.k_norm, n * h.n_head_kv, hd, h.rms_eps, k);
  }
  const RopeParams rope = RopeFor(ctx.model);
  be.Rope(q, n, h.n_head, hd, positions, rope);
  be.Rope(k, n, h.n_head_kv, hd, positions, rope);
  // Each sequence writes its rows into its own cache and attends over it alone.
  StoreAndAttend(be, layer, batch, positions, {q, k, v, q_dim, kv_dim, att}, h.n_head,
                 AttentionOptions{h.kq_scale, L.parts.window, L.sinks}, attention_calls_);
  be.MatMulShared({&L.wo, 1}, att, n, {&o, 1}, {&L.bo, 1});
  be.Axpy(h.residual_scale, o, n * d, x);
  return absl::OkStatus();
}

}  // namespace moe
