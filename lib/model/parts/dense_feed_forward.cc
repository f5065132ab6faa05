#include "lib/model/parts/dense_feed_forward.h"

#include "lib/base/status_macros.h"

namespace moe {

absl::Status DenseFeedForward::Run(const StepContext& ctx, const LayerWeights& L, int64_t n,
                                   float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::experts_s);
  const HParams& h = ctx.model.hp();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd;
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, n * d));
  MOE_ASSIGN_OR_RETURN(float* out, out_.Resize(be, n * d));
  be.RmsNorm(x, L.ffn_norm, n, d, h.rms_eps, xn);
  // The SwiGLU block is an expert over every token: the same kernels.
  const Backend::ExpertJob job{L.dense.gate, L.dense.up, L.dense.down, xn, nullptr, n, out};
  be.RunExperts({&job, 1});
  be.Axpy(h.residual_scale, out, n * d, x);
  return absl::OkStatus();
}

}  // namespace moe
