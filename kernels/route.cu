// The router on the GPU: one thread per token runs RouteToken, the routing core the CPU router
// runs (lib/moe/route_token.h), over its own slice of a scratch buffer. Built with --fmad=false,
// so only the device's expf/logf (within 2 ulp of the host's) can make a score differ.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/route.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 64;

// Per token: probs, sel, work (floats) and order (ids), n_expert each; then group scores and
// group ids, n_groups each.
struct ScratchShape {
  int64_t floats, ids;
  static ScratchShape Of(const TokenRouting& c) {
    const int64_t groups = c.n_groups > 1 ? c.n_groups : 1;
    return {3 * int64_t{c.n_expert} + groups, int64_t{c.n_expert} + groups};
  }
  int64_t bytes() const { return floats * 4 + ids * 4; }
};

__global__ void RouteKernel(TokenRouting c, const float* logits, const int32_t* positions,
                            int64_t n_tokens, uint8_t* scratch, int64_t token_bytes,
                            int32_t* experts, float* weights, float* entropy) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n_tokens) return;
  auto* f = reinterpret_cast<float*>(scratch + t * token_bytes);
  const int64_t groups = c.n_groups > 1 ? c.n_groups : 1;
  auto* ids = reinterpret_cast<int32_t*>(f + 3 * int64_t{c.n_expert} + groups);
  TokenRoutingScratch s{f,   f + c.n_expert,     f + 2 * c.n_expert,
                        ids, f + 3 * c.n_expert, ids + c.n_expert};
  RouteToken(c, logits + t * c.n_expert, positions != nullptr ? positions[t] : -1, s,
             experts + t * c.top_k, weights + t * c.top_k, entropy + t);
}

std::string CheckRouting(const TokenRouting& c, int64_t n_tokens) {
  if (c.n_expert < 1 || c.top_k < 1 || c.top_k > c.n_expert) return "bad expert counts";
  if (c.n_groups > 1 &&
      (c.n_expert % c.n_groups != 0 || c.n_groups_used < 1 || c.n_groups_used > c.n_groups)) {
    return "bad expert groups";
  }
  if (n_tokens < 0) return "negative token count";
  return {};
}

}  // namespace

size_t RouteScratchBytes(const TokenRouting& c, int64_t n_tokens) {
  return static_cast<size_t>(ScratchShape::Of(c).bytes() * (n_tokens > 0 ? n_tokens : 0));
}

std::string RouteTokens(const TokenRouting& c, const float* logits, const int32_t* positions,
                        int64_t n_tokens, void* scratch, int32_t* experts, float* weights,
                        float* entropy, void* stream) {
  if (std::string e = CheckRouting(c, n_tokens); !e.empty()) return e;
  if (n_tokens == 0) return {};
  const int64_t grid = (n_tokens + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many tokens for one launch";
  RouteKernel<<<static_cast<unsigned>(grid), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      c, logits, positions, n_tokens, static_cast<uint8_t*>(scratch), ScratchShape::Of(c).bytes(),
      experts, weights, entropy);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string RouteTokensFromHost(const TokenRouting& c, const float* logits,
                                const int32_t* positions, int64_t n_tokens, int32_t* experts,
                                float* weights, float* entropy) {
  if (std::string e = CheckRouting(c, n_tokens); !e.empty()) return e;
  if (n_tokens == 0) return {};
  TokenRouting dc = c;  // the same routing, its arrays on the device
  DeviceBuffer bias, disabled, dl, dp, scratch, de, dw, dh;
  if (c.selection_bias != nullptr) {
    if (std::string e = bias.CopyIn(c.selection_bias, c.n_expert * sizeof(float)); !e.empty()) {
      return e;
    }
    dc.selection_bias = static_cast<const float*>(bias.p);
  }
  if (c.disabled != nullptr) {
    if (std::string e = disabled.CopyIn(c.disabled, c.n_expert); !e.empty()) return e;
    dc.disabled = static_cast<const uint8_t*>(disabled.p);
  }
  const size_t n = static_cast<size_t>(n_tokens);
  const size_t slots = n * static_cast<size_t>(c.top_k);
  if (std::string e = dl.CopyIn(logits, n * c.n_expert * sizeof(float)); !e.empty()) return e;
  if (positions != nullptr) {
    if (std::string e = dp.CopyIn(positions, n * sizeof(int32_t)); !e.empty()) return e;
  }
  if (std::string e = scratch.Allocate(RouteScratchBytes(c, n_tokens)); !e.empty()) return e;
  if (std::string e = de.Allocate(slots * sizeof(int32_t)); !e.empty()) return e;
  if (std::string e = dw.Allocate(slots * sizeof(float)); !e.empty()) return e;
  if (std::string e = dh.Allocate(n * sizeof(float)); !e.empty()) return e;
  if (std::string e =
          RouteTokens(dc, static_cast<const float*>(dl.p), static_cast<const int32_t*>(dp.p),
                      n_tokens, scratch.p, static_cast<int32_t*>(de.p), static_cast<float*>(dw.p),
                      static_cast<float*>(dh.p), nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  if (std::string e = de.CopyOut(experts, slots * sizeof(int32_t)); !e.empty()) return e;
  if (std::string e = dw.CopyOut(weights, slots * sizeof(float)); !e.empty()) return e;
  return dh.CopyOut(entropy, n * sizeof(float));
}

}  // namespace moe::cuda
