// The routed experts on the GPU by device-side ids: one warp segment per (choice, row), each
// lane summing its blocks by RoutedRowPart (lib/backend/routed_matvec_core.h), the segment adding
// its lanes' parts by shuffles; and the combine of the choices' outputs into the residual.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/routed_experts.h"
#include "lib/backend/combine_core.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void RoutedMatVecKernel(const RoutedExpert* table, int which, const int32_t* ids,
                                   int64_t choices, int64_t div, const float* xf, const Q8Block* x1,
                                   const Q8Block* x8, float* y, int64_t rows, int64_t cols,
                                   int lanes) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row_index = thread / lanes;  // c * rows + r
  const int lane = static_cast<int>(thread % lanes);
  const int64_t c = row_index / rows, r = row_index % rows;
  const int32_t e = c < choices ? ids[c] : -1;
  float sum = 0.f;
  const RoutedMatrix* m = nullptr;
  if (e >= 0) {
    m = &table[e].m[which];
    const int64_t in = c / div, blocks = cols / 32;
    sum = RoutedRowPart(*m, r, cols, xf + in * cols, x1 ? x1 + in * blocks : nullptr,
                        x8 ? x8 + in * blocks : nullptr, lane, lanes);
  }
  // Every lane of the warp takes part in the shuffles (past the end or empty: zeros).
  for (int o = lanes / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (c < choices && lane == 0) {
    y[c * rows + r] = m == nullptr ? 0.f : sum + (m->bias != nullptr ? m->bias[r] : 0.f);
  }
}

__global__ void AddRoutedRowsKernel(int64_t n, int64_t k, int64_t dim, const int32_t* ids,
                                    const float* w, const float* outs, const float* shared_out,
                                    const float* shared_gate, float* x) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= n * dim) return;
  const int64_t t = index / dim, i = index % dim;
  float sum = 0.f;
  for (int64_t j = 0; j < k; ++j) {
    if (ids[t * k + j] >= 0) sum += w[t * k + j] * outs[(t * k + j) * dim + i];
  }
  if (shared_out != nullptr) {
    sum += SharedExpertWeight(shared_gate != nullptr ? shared_gate + t : nullptr) *
           shared_out[t * dim + i];
  }
  x[index] += sum;
}

}  // namespace

std::string RoutedMatVec(const RoutedExpert* table, RoutedMatrixIndex which, const int32_t* ids,
                         int64_t choices, int64_t div, const float* xf, const Q8Block* x1,
                         const Q8Block* x8, float* y, int64_t rows, int64_t cols, void* stream) {
  if (choices < 0 || rows < 0 || cols <= 0 || div < 1) return "bad routed product shape";
  if (choices == 0 || rows == 0) return {};
  const int lanes = RoutedLanes(cols);
  const int64_t threads = choices * rows * lanes;
  const int64_t grid = (threads + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many rows for one launch";
  RoutedMatVecKernel<<<static_cast<unsigned>(grid), kThreads, 0,
                       static_cast<cudaStream_t>(stream)>>>(table, which, ids, choices, div, xf, x1,
                                                            x8, y, rows, cols, lanes);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string AddRoutedRows(int64_t n, int64_t k, int64_t dim, const int32_t* ids, const float* w,
                          const float* outs, const float* shared_out, const float* shared_gate,
                          float* x, void* stream) {
  if (n < 0 || k < 0 || dim < 0) return "negative combine shape";
  if (n * dim == 0) return {};
  constexpr int kCombineThreads = 256;
  const int64_t grid = (n * dim + kCombineThreads - 1) / kCombineThreads;
  if (grid > 0x7fffffff) return "too many values for one launch";
  AddRoutedRowsKernel<<<static_cast<unsigned>(grid), kCombineThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(n, k, dim, ids, w, outs, shared_out,
                                                             shared_gate, x);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

}  // namespace moe::cuda
