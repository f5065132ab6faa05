// The weighted combine on the GPU, one thread per (token, element), summing the token's terms in
// its choices' order as the CPU does (lib/backend/combine_core.h; --fmad=false): the CPU's sums
// bit for bit.
#include <cuda_runtime.h>

#include <vector>

#include "kernels/combine.h"
#include "kernels/cuda_buffer.h"
#include "lib/backend/combine_core.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void AddWeightedRowsKernel(int64_t n, int64_t k, int64_t dim, const float* const* src,
                                      const float* w, float* x) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= n * dim) return;
  const int64_t t = index / dim, i = index % dim;
  x[index] += WeightedSumAt(src + t * k, w + t * k, k, i);
}

}  // namespace

std::string AddWeightedRows(int64_t n, int64_t k, int64_t dim, const float* const* src,
                            const float* w, float* x, void* stream) {
  if (n < 0 || k < 0 || dim < 0) return "negative combine shape";
  if (n * dim == 0 || k == 0) return {};
  const int64_t grid = (n * dim + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many values for one launch";
  AddWeightedRowsKernel<<<static_cast<unsigned>(grid), kThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(n, k, dim, src, w, x);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string AddWeightedRowsFromHost(int64_t n, int64_t k, int64_t dim, const float* const* src,
                                    const float* w, float* x) {
  if (n < 0 || k < 0 || dim < 0) return "negative combine shape";
  if (n * dim == 0 || k == 0) return {};
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  const size_t slots = static_cast<size_t>(n * k);
  // Every source row in one buffer; the device pointer table points into it (null stays null).
  DeviceBuffer rows, table, dw, dx;
  if (std::string e = rows.Allocate(slots * row_bytes); !e.empty()) return e;
  std::vector<const float*> pointers(slots, nullptr);
  for (size_t s = 0; s < slots; ++s) {
    if (src[s] == nullptr) continue;
    float* at = static_cast<float*>(rows.p) + s * dim;
    if (cudaError_t e = cudaMemcpy(at, src[s], row_bytes, cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return CudaError("copy in", e);
    }
    pointers[s] = at;
  }
  if (std::string e = table.CopyIn(pointers.data(), slots * sizeof(float*)); !e.empty()) return e;
  if (std::string e = dw.CopyIn(w, slots * sizeof(float)); !e.empty()) return e;
  if (std::string e = dx.CopyIn(x, static_cast<size_t>(n) * row_bytes); !e.empty()) return e;
  if (std::string e =
          AddWeightedRows(n, k, dim, static_cast<const float* const*>(table.p),
                          static_cast<const float*>(dw.p), static_cast<float*>(dx.p), nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  return dx.CopyOut(x, static_cast<size_t>(n) * row_bytes);
}

}  // namespace moe::cuda
