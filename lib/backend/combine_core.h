// The weighted combine of the experts' outputs (Backend::AddWeightedRows) element by element:
// the terms summed in the order of the token's choices from 0, then added to the residual, as
// the CPU backend does it a chunk of a row at a time and the CUDA kernel (kernels/combine.cu)
// one element per thread (issue 21's one numeric core); and the list of terms it sums, as the
// host paths build it.
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/base/host_device.h"

namespace moe {

// sum over j < k of w[j] * src[j][i], skipping null sources, in order j.
MOE_HOST_DEVICE inline float WeightedSumAt(const float* const* src, const float* w, int64_t k,
                                           int64_t i) {
  float sum = 0.f;
  for (int64_t j = 0; j < k; ++j) {
    if (src[j] != nullptr) sum += w[j] * src[j][i];
  }
  return sum;
}

// The shared expert's weight in the combine: the sigmoid of its gate's logit, 1 without a gate.
MOE_HOST_DEVICE inline float SharedExpertWeight(const float* gate_logit) {
  return gate_logit == nullptr ? 1.f : 1.f / (1.f + expf(-*gate_logit));
}

// The combine's terms as the host lists them for Backend::AddWeightedRows (k routed terms per
// token, plus one when shared_out is given): each token's routed experts' output rows in its
// router's order with their weights (null and 0 for an empty choice, expert -1), then its row of
// the shared expert's output weighted by SharedExpertWeight (shared_gate: one logit per token, or
// null). row(t, j) is the output row of token t's j-th choice. src and w hold n * terms entries.
template <typename RowOf>
void ListCombineTerms(int64_t n, int64_t k, const int32_t* experts, const float* weights, RowOf row,
                      const float* shared_out, const float* shared_gate, int64_t d,
                      const float** src, float* w) {
  const int64_t terms = k + (shared_out != nullptr ? 1 : 0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const bool chosen = experts[t * k + j] >= 0;
      src[t * terms + j] = chosen ? row(t, j) : nullptr;
      w[t * terms + j] = chosen ? weights[t * k + j] : 0.f;
    }
    if (shared_out != nullptr) {
      src[t * terms + k] = shared_out + t * d;
      w[t * terms + k] = SharedExpertWeight(shared_gate != nullptr ? shared_gate + t : nullptr);
    }
  }
}

}  // namespace moe
