#include "lib/model/parts/gated_delta_net.h"

#include "lib/base/status_macros.h"

namespace moe {

absl::Status GatedDeltaNet::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                                absl::Span<const SequenceChunk> batch, int64_t n, float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::attention_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd, inner = h.ssm_inner, channels = h.ssm_conv_channels();
  const int64_t heads = h.ssm_heads;
  for (const SequenceChunk& c : batch) {
    MOE_RETURN_IF_ERROR(CheckRecurrentRows(c.kv->layer(layer), h, layer, "gated delta net"));
  }
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, n * d));
  MOE_ASSIGN_OR_RETURN(float* qkv, qkv_.Resize(be, n * channels));
  MOE_ASSIGN_OR_RETURN(float* z, z_.Resize(be, n * inner));
  // Beta and alpha from their own matrices, or both from one (Qwen3-Next's ssm_ba).
  const bool fused_ba = L.ssm_alpha.empty();
  MOE_ASSIGN_OR_RETURN(float* beta, beta_.Resize(be, n * 2 * heads));
  float* alpha = fused_ba ? beta : beta + n * heads;
  const int64_t ab_stride = fused_ba ? 2 * heads : heads;
  MOE_ASSIGN_OR_RETURN(float* conv, conv_.Resize(be, n * channels));
  MOE_ASSIGN_OR_RETURN(float* y, y_.Resize(be, n * inner));
  MOE_ASSIGN_OR_RETURN(float* o, o_.Resize(be, n * d));
  const WeightView in[] = {L.ssm_in, L.ssm_z, L.ssm_beta, L.ssm_alpha};
  const size_t products = fused_ba ? 3 : 4;
  be.PrefetchProducts(absl::MakeConstSpan(in, products), n);
  be.RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn);
  float* const in_out[] = {qkv, z, beta, alpha};
  const float* const no_bias[] = {nullptr, nullptr, nullptr, nullptr};
  be.MatMulShared(absl::MakeConstSpan(in, products), xn, n, absl::MakeConstSpan(in_out, products),
                  absl::MakeConstSpan(no_bias, products));
  be.PrefetchProducts({&L.wo, 1}, n);
  Backend::GatedDeltaArgs delta;
  delta.qkv_stride = channels;
  delta.ab_stride = ab_stride;
  delta.grouped_heads = h.ssm_grouped_heads;
  delta.dt_bias = L.ssm_dt_bias;
  delta.a = L.ssm_a;
  delta.heads = heads;
  delta.key_heads = h.ssm_groups;
  delta.size = h.ssm_state;
  delta.eps = h.rms_eps;  // llama.cpp's L2 norm of q and k takes the RMS norm's epsilon
  // Each sequence convolves over and carries the state in its own cache.
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    const KvLayerView v = c.kv->layer(layer);
    const int32_t* positions = ctx.positions.data() + row;
    be.SsmConv(qkv + row * channels, channels, m, positions, L.ssm_conv, /*bias=*/nullptr,
               h.ssm_conv_kernel, v, conv + row * channels);
    delta.qkv = conv + row * channels;
    delta.beta = beta + row * ab_stride;
    delta.alpha = alpha + row * ab_stride;
    be.GatedDeltaNet(delta, m, positions, v, y + row * inner);
    row += m;
  }
  be.RmsNorm(y, L.ssm_norm, n * heads, h.ssm_state, h.rms_eps, y);
  be.MultiplyByGate(Backend::GateFunction::kSilu, z, n * inner, y);
  be.MatMul(L.wo, y, n, o);
  be.Axpy(h.residual_scale, o, n * d, x);
  return absl::OkStatus();
}

}  // namespace moe
