// Launchers of the CUDA token-to-expert dispatch (expert_dispatch.cu): each expert's tokens in
// token order and each choice's place in its expert's list, on the device, as
// lib/moe/expert_dispatch.h defines them. Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstdint>
#include <string>

namespace moe::cuda {

// From experts [n x k] (ids < n_expert, -1 = no choice): offsets [n_expert + 1] (expert e's
// tokens are tokens[offsets[e]..offsets[e + 1])), tokens [n x k at most] and place [n x k] (-1
// for empty choices), all in device memory. One thread per expert counts, one prefix sum, one
// thread per expert lists: no atomics, so the lists are in token order every run. Queued on
// `stream` (a cudaStream_t; null: the default stream) without waiting: the error returned is the
// launches'.
std::string DispatchExperts(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert,
                            int64_t* offsets, int32_t* tokens, int32_t* place, void* stream);

// The same from and to host memory (copied over and back, then waits): for the GPU tests.
std::string DispatchExpertsFromHost(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert,
                                    int64_t* offsets, int32_t* tokens, int32_t* place);

}  // namespace moe::cuda
