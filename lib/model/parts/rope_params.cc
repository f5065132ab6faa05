#include "lib/model/parts/rope_params.h"

#include <cmath>

namespace moe {

RopeParams RopeFor(const Model& model, int64_t offset) {
  const HParams& h = model.hp();
  RopeParams r;
  r.layout = h.rope_style == RopeStyle::kNeox ? RopeLayout::kNeox : RopeLayout::kNorm;
  r.n_rot = h.rope_dim;
  r.offset = offset;
  r.freq_base = h.rope_freq_base;
  r.yarn_factor = h.yarn_factor;
  r.yarn_orig_ctx = h.yarn_orig_ctx;
  r.yarn_beta_fast = h.yarn_beta_fast;
  r.yarn_beta_slow = h.yarn_beta_slow;
  r.magnitude = h.rope_attn_factor;
  if (h.yarn_factor > 1.f) r.magnitude *= 1.f + 0.1f * std::log(h.yarn_factor);
  r.freq_factors = model.rope_freq_factors();
  return r;
}

}  // namespace moe
