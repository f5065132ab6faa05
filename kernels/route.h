// Launchers of the CUDA router (route.cu): each token's logits to its experts and weights on the
// device, by the routing core the CPU router runs (lib/moe/route_token.h), so the step never
// waits for the host to choose. Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/moe/route_token.h"

namespace moe::cuda {

// Device scratch RouteTokens needs for n_tokens tokens of routing c (bytes).
size_t RouteScratchBytes(const TokenRouting& c, int64_t n_tokens);

// Routes n_tokens tokens, one thread each: logits [n_tokens x n_expert], positions [n_tokens]
// (null: no noise), and c's selection bias and disabled mask in device memory; writes experts
// and weights [n_tokens x top_k] (best first; -1 and 0 in slots left empty) and entropy
// [n_tokens], in device memory. Queued on `stream` (a cudaStream_t; null: the default stream)
// without waiting: the error returned is the launch's. The per-step capacity
// (RoutingPolicy::capacity_factor) ranks tokens one after another and stays on the host.
std::string RouteTokens(const TokenRouting& c, const float* logits, const int32_t* positions,
                        int64_t n_tokens, void* scratch, int32_t* experts, float* weights,
                        float* entropy, void* stream);

// The same from and to host memory (c's arrays too; copied over and back, then waits): for the
// GPU tests and checks.
std::string RouteTokensFromHost(const TokenRouting& c, const float* logits,
                                const int32_t* positions, int64_t n_tokens, int32_t* experts,
                                float* weights, float* entropy);

}  // namespace moe::cuda
