// Token-to-expert dispatch as compressed lists: for each expert the tokens that chose it, in token
// order, and for each choice its place in its expert's list, so that each expert runs once over
// all its tokens. Two ways to the same lists: per-expert MOE_HOST_DEVICE steps (count, then list)
// so that the CUDA kernel (kernels/expert_dispatch.cu) runs one thread per expert with no atomics
// and no host round trip (issue 21), and one counting pass for a single host thread
// (ListExpertsByCounting; ExpertLists in expert_lists.h owns its arrays).
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

// DispatchExperts' lists in O(n x k + n_expert) on one thread (DispatchExperts rereads the
// choices once per expert, which suits a thread per expert, not a host loop over 256 experts and
// a long prompt): count, prefix sums, then each choice appended in token order.
inline void ListExpertsByCounting(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert,
                                  int64_t* offsets, int32_t* tokens, int32_t* place) {
  // After the prefix sums offsets[e + 1] holds expert e's start; it advances as e's tokens are
  // appended and so ends at e's end, which is expert e + 1's start: one array serves as the
  // cursors and then as the offsets.
  for (int32_t e = 0; e <= n_expert; ++e) offsets[e] = 0;
  for (int64_t s = 0; s < n * k; ++s) {
    if (experts[s] >= 0 && experts[s] + 2 <= n_expert) ++offsets[experts[s] + 2];
  }
  for (int32_t e = 2; e <= n_expert; ++e) offsets[e] += offsets[e - 1];
  for (int64_t s = 0; s < n * k; ++s) {
    const int32_t e = experts[s];
    if (e < 0) {
      place[s] = -1;
      continue;
    }
    const int64_t at = offsets[e + 1]++;
    tokens[at] = static_cast<int32_t>(s / k);
    place[s] = static_cast<int32_t>(at);  // made relative to the expert's start below
  }
  for (int64_t s = 0; s < n * k; ++s) {
    if (experts[s] >= 0) place[s] -= static_cast<int32_t>(offsets[experts[s]]);
  }
}

}  // namespace moe
