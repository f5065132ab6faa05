#include "lib/model/parts/latent_attention.h"

#include <algorithm>

#include "lib/base/status_macros.h"
#include "lib/model/parts/rope_params.h"
#include "lib/model/parts/sequence_attention.h"

namespace moe {
namespace {

// Head `h` of a stacked per-head weight [n_head x rows x cols].
WeightView HeadSlice(const WeightView& w, int64_t n_head, int64_t h) {
  WeightView s = w;
  s.rows = w.rows / n_head;
  s.data = w.data + h * s.rows * w.row_bytes();
  return s;
}

}  // namespace

absl::Status LatentAttention::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                                  absl::Span<const SequenceChunk> batch, int64_t n, float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::attention_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd, heads = h.n_head, r = h.kv_lora_rank, dr = h.rope_dim;
  const int64_t dn = h.qk_nope_dim, dv = h.v_head_dim, dq = dn + dr, dk = r + dr;
  const int32_t* positions = ctx.positions.data();
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, n * d));
  be.RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn);

  // Queries: through the low-rank pair when there is one.
  MOE_ASSIGN_OR_RETURN(float* q, q_.Resize(be, n * heads * dq));
  if (!L.wq_a.empty()) {
    MOE_ASSIGN_OR_RETURN(float* q_low, q_low_.Resize(be, n * h.q_lora_rank));
    be.MatMul(L.wq_a, xn, n, q_low);
    be.RmsNorm(q_low, L.q_a_norm, n, h.q_lora_rank, h.rms_eps, q_low);
    be.MatMul(L.wq_b, q_low, n, q);
  } else {
    be.MatMul(L.wq, xn, n, q);
  }
  // The cached row: [rmsnorm(latent) ; rope(k_pe)].
  MOE_ASSIGN_OR_RETURN(float* kv_rows, kv_.Resize(be, n * dk));
  be.MatMul(L.wkv_a, xn, n, kv_rows);
  MOE_ASSIGN_OR_RETURN(float* latent, latent_.Resize(be, n * r));
  be.CopyRows(kv_rows, dk, n, r, latent, r);
  be.RmsNorm(latent, L.kv_a_norm, n, r, h.rms_eps, latent);
  be.CopyRows(latent, r, n, r, kv_rows, dk);
  be.Rope(kv_rows, n, 1, dk, positions, RopeFor(ctx.model, r));
  be.Rope(q, n, heads, dq, positions, RopeFor(ctx.model, dn));

  // Each head's query in the latent's space, beside its RoPE part.
  MOE_ASSIGN_OR_RETURN(float* q_abs, q_abs_.Resize(be, n * heads * dk));
  MOE_ASSIGN_OR_RETURN(float* gather, gather_.Resize(be, n * std::max(dn, r)));
  MOE_ASSIGN_OR_RETURN(float* product, product_.Resize(be, n * std::max(r, dv)));
  for (int64_t hh = 0; hh < heads; ++hh) {
    be.CopyRows(q + hh * dq, heads * dq, n, dn, gather, dn);
    be.MatMul(HeadSlice(L.wk_b, heads, hh), gather, n, product);
    be.CopyRows(product, r, n, r, q_abs + hh * dk, heads * dk);
    be.CopyRows(q + hh * dq + dn, heads * dq, n, dr, q_abs + hh * dk + r, heads * dk);
  }

  // One shared KV head per sequence; a row's values are its latent (the first r of the key).
  MOE_ASSIGN_OR_RETURN(float* att_latent, att_latent_.Resize(be, n * heads * dk));
  StoreAndAttend(be, layer, batch, positions, {q_abs, kv_rows, kv_rows, heads * dk, dk, att_latent},
                 heads, AttentionOptions{h.kq_scale}, attention_calls_);

  // Out of the latent, per head, then the output projection.
  MOE_ASSIGN_OR_RETURN(float* att, att_.Resize(be, n * heads * dv));
  for (int64_t hh = 0; hh < heads; ++hh) {
    be.CopyRows(att_latent + hh * dk, heads * dk, n, r, gather, r);
    be.MatMul(HeadSlice(L.wv_b, heads, hh), gather, n, product);
    be.CopyRows(product, dv, n, dv, att + hh * dv, heads * dv);
  }
  MOE_ASSIGN_OR_RETURN(float* o, o_.Resize(be, n * d));
  be.MatMul(L.wo, att, n, o);
  be.Axpy(h.residual_scale, o, n * d, x);
  return absl::OkStatus();
}

}  // namespace moe
