// Token-to-expert dispatch as compressed lists: for each expert the tokens that chose it, in token
// order, and for each choice its place in its expert's list — what the mixture layer builds on
// the CPU (MixtureFeedForward::Dispatch) so that each expert runs once over all its tokens.
// Written as per-expert MOE_HOST_DEVICE steps (count, then list) so that the CUDA kernel
// (kernels/expert_dispatch.cu) runs one thread per expert and gets the same lists with no atomics
// and no host round trip (issue 21).
#pragma once

#include <cstdint>

#include "lib/base/host_device.h"

namespace moe {

// How many of the n x k choices (experts[t * k + j], -1 = none) are expert e.
MOE_HOST_DEVICE inline int32_t CountExpertChoices(const int32_t* experts, int64_t n, int64_t k,
                                                  int32_t e) {
  int32_t count = 0;
  for (int64_t s = 0; s < n * k; ++s) count += experts[s] == e;
  return count;
}

// Expert e's tokens into tokens[first ...] in token order, and each of its choices' place in
// that list into place[t * k + j] (other experts' places untouched).
MOE_HOST_DEVICE inline void ListExpertChoices(const int32_t* experts, int64_t n, int64_t k,
                                              int32_t e, int64_t first, int32_t* tokens,
                                              int32_t* place) {
  int32_t next = 0;
  for (int64_t s = 0; s < n * k; ++s) {
    if (experts[s] != e) continue;
    tokens[first + next] = static_cast<int32_t>(s / k);
    place[s] = next++;
  }
}

// The whole dispatch on one thread: offsets[e]..offsets[e + 1] is expert e's range of tokens
// (offsets has n_expert + 1 entries), place as ListExpertChoices; -1 in place for empty choices.
MOE_HOST_DEVICE inline void DispatchExperts(const int32_t* experts, int64_t n, int64_t k,
                                            int32_t n_expert, int64_t* offsets, int32_t* tokens,
                                            int32_t* place) {
  offsets[0] = 0;
  for (int32_t e = 0; e < n_expert; ++e) {
    offsets[e + 1] = offsets[e] + CountExpertChoices(experts, n, k, e);
  }
  for (int64_t s = 0; s < n * k; ++s) place[s] = -1;
  for (int32_t e = 0; e < n_expert; ++e) {
    ListExpertChoices(experts, n, k, e, offsets[e], tokens, place);
  }
}

}  // namespace moe
