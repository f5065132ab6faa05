#include "lib/model/parts/mamba2_mixer.h"

#include "lib/base/status_macros.h"

namespace moe {

absl::Status Mamba2Mixer::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                              absl::Span<const SequenceChunk> batch, int64_t n, float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::attention_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd, inner = h.ssm_inner, channels = h.ssm_conv_channels();
  const int64_t in_proj = inner + channels + h.ssm_heads;  // z, xBC, dt
  for (const SequenceChunk& c : batch) {
    MOE_RETURN_IF_ERROR(CheckRecurrentRows(c.kv->layer(layer), h, layer, "Mamba-2"));
  }
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, n * d));
  MOE_ASSIGN_OR_RETURN(float* zxbcdt, zxbcdt_.Resize(be, n * in_proj));
  MOE_ASSIGN_OR_RETURN(float* conv, conv_.Resize(be, n * channels));
  MOE_ASSIGN_OR_RETURN(float* y, y_.Resize(be, n * inner));
  MOE_ASSIGN_OR_RETURN(float* yn, yn_.Resize(be, n * inner));
  MOE_ASSIGN_OR_RETURN(float* o, o_.Resize(be, n * d));
  be.PrefetchProducts({&L.ssm_in, 1}, n);
  be.RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn);
  be.MatMul(L.ssm_in, xn, n, zxbcdt);
  be.PrefetchProducts({&L.wo, 1}, n);
  Backend::SsmScanArgs scan;
  scan.dt_stride = in_proj;
  scan.dt_bias = L.ssm_dt_bias;
  scan.a = L.ssm_a;
  scan.d = L.ssm_d;
  scan.heads = h.ssm_heads;
  scan.head_dim = inner / h.ssm_heads;
  scan.state_size = h.ssm_state;
  scan.groups = h.ssm_groups;
  // Each sequence convolves over and carries the state in its own cache.
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    const KvLayerView v = c.kv->layer(layer);
    const int32_t* positions = ctx.positions.data() + row;
    be.SsmConv(zxbcdt + row * in_proj + inner, in_proj, m, positions, L.ssm_conv, L.ssm_conv_bias,
               h.ssm_conv_kernel, v, conv + row * channels);
    scan.xbc = conv + row * channels;
    scan.dt = zxbcdt + row * in_proj + inner + channels;
    be.SsmScan(scan, m, positions, v, y + row * inner);
    row += m;
  }
  be.GatedGroupRmsNorm(y, zxbcdt, in_proj, L.ssm_norm, n, inner, h.ssm_groups, h.rms_eps, yn);
  be.MatMul(L.wo, yn, n, o);
  be.Axpy(h.residual_scale, o, n * d, x);
  return absl::OkStatus();
}

}  // namespace moe
