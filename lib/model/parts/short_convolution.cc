#include "lib/model/parts/short_convolution.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {

absl::Status ShortConvolution::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                                   absl::Span<const SequenceChunk> batch, int64_t n, float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::attention_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd;
  for (const SequenceChunk& c : batch) {
    MOE_RETURN_IF_ERROR(CheckCarriedSlot(c.kv->layer(layer), d, h.short_conv_kernel,
                                         /*state_floats=*/0, layer, "short convolution"));
  }
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, n * d));
  MOE_ASSIGN_OR_RETURN(float* bcx, bcx_.Resize(be, n * 3 * d));
  MOE_ASSIGN_OR_RETURN(float* y, y_.Resize(be, n * d));
  MOE_ASSIGN_OR_RETURN(float* o, o_.Resize(be, n * d));
  be.PrefetchProducts({&L.conv_in, 1}, n);
  be.RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn);
  be.MatMul(L.conv_in, xn, n, bcx);
  be.PrefetchProducts({&L.wo, 1}, n);
  // Each sequence keeps its rows in its own cache and reads only them.
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    be.ShortConv(bcx + row * 3 * d, m, ctx.positions.data() + row, L.conv_kernel,
                 h.short_conv_kernel, c.kv->layer(layer), y + row * d);
    row += m;
  }
  be.MatMul(L.wo, y, n, o);
  be.Axpy(h.residual_scale, o, n * d, x);
  return absl::OkStatus();
}

}  // namespace moe
