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

bool MultimodalPairTurnsForText(const std::array<int64_t, 4>& s, int64_t i) {
  // Pairs cycle through the sections (ggml_mrope_cache_init): within each run of sect_dims
  // pairs, every third from 0 takes the temporal position, from 1 the height and from 2 the
  // width, while the section has pairs left; the rest take the extra position.
  const int64_t sector = i % (s[0] + s[1] + s[2] + s[3]);
  if (sector % 3 == 1 && sector < 3 * s[1]) return true;
  if (sector % 3 == 2 && sector < 3 * s[2]) return true;
  if (sector % 3 == 0 && sector < 3 * s[0]) return true;
  return false;
}

}  // namespace moe
