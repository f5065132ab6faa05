#include "lib/model/parts/grouped_query_attention.h"

#include <cmath>

#include "lib/base/status_macros.h"
#include "lib/model/parts/rope_params.h"
#include "lib/model/parts/sequence_attention.h"

namespace moe {
namespace {

// The factor a NoPE layer's query at `position` is scaled by (HParams::attn_temp_scale != 0).
float QueryTemperature(const HParams& h, int32_t position) {
  // As llama.cpp computes it: the floor in float, the logarithm in double.
  const float chunks = std::floor((static_cast<float>(position) + h.attn_temp_offset) /
                                  static_cast<float>(h.attn_temp_floor));
  return static_cast<float>(std::log(chunks + 1.0) * h.attn_temp_scale + 1.0);
}

}  // namespace

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
  // With an output gate, attn_q yields each head's q then its gate: projected together, then
  // taken apart.
  float* q_gate = nullptr;
  float* gate = nullptr;
  if (h.attention_output_gate) {
    MOE_ASSIGN_OR_RETURN(q_gate, q_gate_.Resize(be, n * 2 * q_dim));
    MOE_ASSIGN_OR_RETURN(gate, gate_.Resize(be, n * q_dim));
  }
  float* const qkv_out[] = {q_gate ? q_gate : q, k, v};
  const float* const qkv_bias[] = {L.bq, L.bk, L.bv};
  be.MatMulShared(qkv, xn, n, qkv_out, qkv_bias);
  if (q_gate != nullptr) {
    be.CopyRows(q_gate, 2 * hd, n * h.n_head, hd, q, hd);
    be.CopyRows(q_gate + hd, 2 * hd, n * h.n_head, hd, gate, hd);
  }
  be.PrefetchProducts({&L.wo, 1}, n);
  if (h.qk_norm == QkNorm::kFull) {
    be.RmsNorm(q, L.q_norm, n, q_dim, h.rms_eps, q);
    be.RmsNorm(k, L.k_norm, n, kv_dim, h.rms_eps, k);
  } else if (h.qk_norm == QkNorm::kPerHead) {
    be.RmsNorm(q, L.q_norm, n * h.n_head, hd, h.rms_eps, q);
    be.RmsNorm(k, L.k_norm, n * h.n_head_kv, hd, h.rms_eps, k);
  }
  if (h.layer_uses_rope(layer)) {
    const RopeParams rope = RopeFor(ctx.model);
    be.Rope(q, n, h.n_head, hd, positions, rope);
    be.Rope(k, n, h.n_head_kv, hd, positions, rope);
    if (h.qk_norm == QkNorm::kPerHeadUnweighted || h.qk_norm == QkNorm::kPerHeadAfterRope) {
      // Weighted for Hunyuan; Llama 4's L2 norm has none (null).
      be.RmsNorm(q, L.q_norm, n * h.n_head, hd, h.rms_eps, q);
      be.RmsNorm(k, L.k_norm, n * h.n_head_kv, hd, h.rms_eps, k);
    }
  } else if (h.attn_temp_scale != 0.f) {
    // A NoPE layer's queries sharpen with the distance from the start (Llama 4).
    query_scales_.resize(n);
    for (int64_t t = 0; t < n; ++t) query_scales_[t] = QueryTemperature(h, positions[t]);
    be.ScaleRows(q, n, q_dim, query_scales_.data());
  }
  // Each sequence writes its rows into its own cache and attends over it alone.
  const AttentionOptions options{h.kq_scale, L.parts.window, L.sinks,
                                 L.parts.window > 0 && h.window_chunked};
  StoreAndAttend(be, layer, batch, positions, {q, k, v, q_dim, kv_dim, att}, h.n_head, options,
                 attention_calls_);
  if (gate != nullptr) be.MultiplyByGate(Backend::GateFunction::kSigmoid, gate, n * q_dim, att);
  be.MatMulShared({&L.wo, 1}, att, n, {&o, 1}, {&L.bo, 1});
  be.Axpy(h.residual_scale, o, n * d, x);
  return absl::OkStatus();
}

}  // namespace moe
