// A dense SwiGLU feed-forward block (the leading layers of DeepSeek- and GLM-style models).
#pragma once

#include <vector>

#include "lib/model/parts/step_context.h"

namespace moe {

class DenseFeedForward {
 public:
  void Run(const StepContext& ctx, const LayerWeights& L, int64_t n, float* x);

 private:
  std::vector<float> xn_, out_;
};

}  // namespace moe
