// The cosines and sines of RoPE's angles for a step's tokens, kept from one Rope call to the
// next. Every layer turns q and k at the same positions with (nearly always) the same
// parameters, so a step computed the same n x n_rot / 2 sines and cosines twice a layer: at 8
// sequences on the bench model ~8 us a layer, a third of it serial (k's heads are too few for a
// parallel loop). The values are those the calls computed (the same functions, same order).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/backend/rope_core.h"

namespace moe {

class RopeTable {
 public:
  // Makes the table describe these positions and parameters; returns whether its tokens must be
  // filled (FillTokens over [0, n), in disjoint ranges from any threads) before they are read.
  bool Reset(const int32_t* positions, int64_t n, const RopeParams& rope);
  void FillTokens(int64_t t0, int64_t t1);

  // Token t's cosines (n_rot / 2 of them, times the magnitude), followed by its sines.
  const float* Row(int64_t t) const { return values_.data() + t * 2 * half_; }

 private:
  bool valid_ = false;
  RopeParams rope_;
  int64_t half_ = 0;
  std::vector<int32_t> positions_;
  std::vector<float> factors_;      // a copy of rope_.freq_factors' values (empty: none)
  std::vector<float> freq_, ramp_;  // each pair's frequency and YaRN share
  std::vector<float> values_;       // [n x (cos[half], sin[half])]
};

}  // namespace moe
