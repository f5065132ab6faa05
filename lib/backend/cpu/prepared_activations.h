// Token activations made ready for dot products with weight rows of any type: kept as floats for
// float weights (and for exact mode), quantized once to 8-bit blocks for quantized weights.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/q8_activations.h"
#include "lib/backend/weight_view.h"

namespace moe {

class PreparedActivations {
 public:
  PreparedActivations(SimdLevel level, bool quantize) : level_(level), quantize_(quantize) {}

  // x: n rows of `cols` floats, valid until the next Prepare. Quantizes only when some weight
  // that will meet it is quantized (quantized_weights).
  void Prepare(const float* x, int64_t n, int64_t cols, bool quantized_weights);

  // out[t * stride] = row r of w . token t, for every token. Safe to call from many threads.
  void RowDots(const WeightView& w, int64_t r, float* out, int64_t stride) const;

  int64_t n() const { return n_; }

 private:
  SimdLevel level_;
  bool quantize_;
  const float* x_ = nullptr;
  int64_t n_ = 0, cols_ = 0;
  std::vector<Q8Block> q_;
};

}  // namespace moe
