// Element-wise operations, one thread per value (--fmad=false: a * x + y rounds twice, as the
// CPU's loop does).
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/elementwise.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void AxpyKernel(float a, const float* x, int64_t count, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] += a * x[i];
}

__global__ void ScaleKernel(float a, float* x, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] *= a;
}

__global__ void ScaleRowsKernel(float* x, const float* scales, int64_t count, int64_t dim) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] *= scales[i / dim];
}

__global__ void AddBiasKernel(float* x, const float* bias, int64_t count, int64_t dim) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += bias[i % dim];
}

std::string Grid(int64_t count, unsigned* grid) {
  const int64_t g = (count + kThreads - 1) / kThreads;
  if (g > 0x7fffffff) return "too many values for one launch";
  *grid = static_cast<unsigned>(g);
  return {};
}

}  // namespace

std::string Axpy(float a, const float* x, int64_t count, float* y, void* stream) {
  if (count < 0) return "negative count";
  if (count == 0) return {};
  unsigned grid = 0;
  if (std::string e = Grid(count, &grid); !e.empty()) return e;
  AxpyKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, x, count, y);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string Scale(float a, float* x, int64_t count, void* stream) {
  if (count < 0) return "negative count";
  if (count == 0) return {};
  unsigned grid = 0;
  if (std::string e = Grid(count, &grid); !e.empty()) return e;
  ScaleKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, x, count);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string ScaleRows(float* x, int64_t n, int64_t dim, const float* scales, void* stream) {
  if (n < 0 || dim < 0) return "negative shape";
  if (n * dim == 0) return {};
  unsigned grid = 0;
  if (std::string e = Grid(n * dim, &grid); !e.empty()) return e;
  ScaleRowsKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, scales, n * dim,
                                                                            dim);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string AddBias(float* x, const float* bias, int64_t n, int64_t dim, void* stream) {
  if (n < 0 || dim < 0) return "negative shape";
  if (n * dim == 0) return {};
  unsigned grid = 0;
  if (std::string e = Grid(n * dim, &grid); !e.empty()) return e;
  AddBiasKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, bias, n * dim, dim);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

}  // namespace moe::cuda
