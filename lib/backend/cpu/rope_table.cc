#include "lib/backend/cpu/rope_table.h"

#include <algorithm>
#include <cmath>

namespace moe {
namespace {

// Whether b gives the angles a gave; a's factors were copied into `factors` (compared by value:
// an array freed and another allocated at its address must not pass for it).
bool SameRope(const RopeParams& a, const std::vector<float>& factors, const RopeParams& b) {
  if (a.n_rot != b.n_rot || (b.freq_factors == nullptr) != factors.empty()) return false;
  if (b.freq_factors != nullptr && !std::equal(factors.begin(), factors.end(), b.freq_factors)) {
    return false;
  }
  return a.freq_base == b.freq_base && a.yarn_factor == b.yarn_factor &&
         a.yarn_orig_ctx == b.yarn_orig_ctx && a.yarn_beta_fast == b.yarn_beta_fast &&
         a.yarn_beta_slow == b.yarn_beta_slow && a.magnitude == b.magnitude;
}

}  // namespace

bool RopeTable::Reset(const int32_t* positions, int64_t n, const RopeParams& rope) {
  if (valid_ && SameRope(rope_, factors_, rope) && static_cast<int64_t>(positions_.size()) == n &&
      std::equal(positions, positions + n, positions_.begin())) {
    return false;
  }
  rope_ = rope;
  half_ = rope.n_rot / 2;
  if (rope.freq_factors != nullptr) {
    factors_.assign(rope.freq_factors, rope.freq_factors + half_);
  } else {
    factors_.clear();
  }
  rope_.freq_factors = factors_.empty() ? nullptr : factors_.data();
  positions_.assign(positions, positions + n);
  const RopeCorrection corr = RopeCorrectionOf(rope);
  freq_.resize(half_);
  ramp_.resize(half_);
  for (int64_t i = 0; i < half_; ++i) {
    freq_[i] = RopePairFrequency(rope, i);
    ramp_[i] = RopePairRamp(rope, corr, i);
  }
  values_.resize(n * 2 * half_);
  valid_ = true;
  return true;
}

void RopeTable::FillTokens(int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float* c = values_.data() + t * 2 * half_;
    float* s = c + half_;
    for (int64_t i = 0; i < half_; ++i) {
      const float theta = RopeAngle(rope_, positions_[t], freq_[i], ramp_[i]);
      c[i] = std::cos(theta) * rope_.magnitude;
      s[i] = std::sin(theta) * rope_.magnitude;
    }
  }
}

}  // namespace moe
