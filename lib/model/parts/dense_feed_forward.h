// A dense SwiGLU feed-forward block (the leading layers of DeepSeek- and GLM-style models).
#pragma once

#include "absl/status/status.h"
#include "lib/backend/backend_buffer.h"
#include "lib/model/parts/step_context.h"

namespace moe {

class DenseFeedForward {
 public:
  absl::Status Run(const StepContext& ctx, const LayerWeights& L, int64_t n, float* x);

 private:
  BackendBuffer<float> xn_, out_;
};

}  // namespace moe
