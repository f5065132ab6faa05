// The weighted combine of the experts' outputs (Backend::AddWeightedRows) element by element:
// the terms summed in the order of the token's choices from 0, then added to the residual, as
// the CPU backend does it a chunk of a row at a time and the CUDA kernel (kernels/combine.cu)
// one element per thread (issue 21's one numeric core).
#pragma once

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

}  // namespace moe
