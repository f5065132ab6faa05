#include "lib/model/parts/dense_feed_forward.h"

namespace moe {

void DenseFeedForward::Run(const StepContext& ctx, const LayerWeights& L, int64_t n, float* x) {
  StageTimer timer(ctx.telemetry, &StageTimes::experts_s);
  const HParams& h = ctx.model.hp();
  const int64_t d = h.n_embd;
  xn_.resize(n * d);
  out_.resize(n * d);
  ctx.backend->RmsNorm(x, L.ffn_norm, n, d, h.rms_eps, xn_.data());
  // The SwiGLU block is an expert over every token: the same kernels.
  const Backend::ExpertJob job{L.dense.gate, L.dense.up, L.dense.down, xn_.data(),
                               nullptr,      n,          out_.data()};
  ctx.backend->RunExperts({&job, 1});
  ctx.backend->Axpy(1.0f, out_.data(), n * d, x);
}

}  // namespace moe
