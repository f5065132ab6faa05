// Token-to-expert dispatch on the GPU by the per-expert steps of lib/moe/expert_dispatch.h: a
// thread per expert counts its choices, one thread turns the counts into offsets (a few hundred
// experts at most), a thread per expert lists its tokens in token order.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/expert_dispatch.h"
#include "lib/moe/expert_dispatch.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void CountKernel(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert,
                            int64_t* offsets, int32_t* place) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < n_expert) {
    offsets[index + 1] = CountExpertChoices(experts, n, k, static_cast<int32_t>(index));
  }
  for (int64_t s = index; s < n * k; s += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    place[s] = -1;
  }
}

__global__ void PrefixKernel(int64_t* offsets, int32_t n_expert) {
  offsets[0] = 0;
  for (int32_t e = 0; e < n_expert; ++e) offsets[e + 1] += offsets[e];
}

__global__ void ListKernel(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert,
                           const int64_t* offsets, int32_t* tokens, int32_t* place) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < n_expert) {
    ListExpertChoices(experts, n, k, static_cast<int32_t>(e), offsets[e], tokens, place);
  }
}

}  // namespace

std::string DispatchExperts(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert,
                            int64_t* offsets, int32_t* tokens, int32_t* place, void* stream) {
  if (n < 0 || k < 0 || n_expert < 1) return "bad dispatch shape";
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned grid = static_cast<unsigned>((n_expert + kThreads - 1) / kThreads);
  CountKernel<<<grid, kThreads, 0, s>>>(experts, n, k, n_expert, offsets, place);
  PrefixKernel<<<1, 1, 0, s>>>(offsets, n_expert);
  ListKernel<<<grid, kThreads, 0, s>>>(experts, n, k, n_expert, offsets, tokens, place);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string DispatchExpertsFromHost(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert,
                                    int64_t* offsets, int32_t* tokens, int32_t* place) {
  if (n < 0 || k < 0 || n_expert < 1) return "bad dispatch shape";
  const size_t slots = static_cast<size_t>(n * k);
  const size_t offsets_bytes = (static_cast<size_t>(n_expert) + 1) * sizeof(int64_t);
  DeviceBuffer de, doff, dt, dp;
  // One element at least: a step with no tokens still has offsets to write.
  if (std::string e = de.Allocate(slots * sizeof(int32_t) + 4); !e.empty()) return e;
  if (slots > 0) {
    if (cudaError_t e = cudaMemcpy(de.p, experts, slots * sizeof(int32_t), cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return CudaError("copy in", e);
    }
  }
  if (std::string e = doff.Allocate(offsets_bytes); !e.empty()) return e;
  if (std::string e = dt.Allocate(slots * sizeof(int32_t) + 4); !e.empty()) return e;
  if (std::string e = dp.Allocate(slots * sizeof(int32_t) + 4); !e.empty()) return e;
  if (std::string e = DispatchExperts(static_cast<const int32_t*>(de.p), n, k, n_expert,
                                      static_cast<int64_t*>(doff.p), static_cast<int32_t*>(dt.p),
                                      static_cast<int32_t*>(dp.p), nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  if (std::string e = doff.CopyOut(offsets, offsets_bytes); !e.empty()) return e;
  if (slots == 0) return {};
  if (std::string e = dt.CopyOut(tokens, slots * sizeof(int32_t)); !e.empty()) return e;
  return dp.CopyOut(place, slots * sizeof(int32_t));
}

}  // namespace moe::cuda
