// RMSNorm on the GPU, one block per row: 8 threads sum the CPU's 8 interleaved lanes of squares
// in double (lib/backend/norm_core.h), so the row's scale is the CPU's bit for bit (sqrtf is
// correctly rounded on both); then every thread scales its share of the row.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/rms_norm.h"
#include "lib/backend/norm_core.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RmsNormKernel(const float* x, const float* weight, int64_t dim, float eps,
                              float* y) {
  __shared__ double part[kRmsNormLanes];
  __shared__ float inverse;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  if (threadIdx.x < kRmsNormLanes) {
    part[threadIdx.x] = RmsNormLaneSum(xr, dim, static_cast<int>(threadIdx.x));
  }
  __syncthreads();
  if (threadIdx.x == 0) inverse = RmsNormInverse(part, xr, dim, eps);
  __syncthreads();  // every read of x is done before any thread writes y (in place)
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    yr[i] = RmsNormElement(xr[i], inverse, weight != nullptr ? weight[i] : 1.f);
  }
}

}  // namespace

std::string RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                    float* y, void* stream) {
  if (n < 0 || dim < 1) return "bad RMSNorm shape";
  if (n == 0) return {};
  if (n > 0x7fffffff) return "too many rows for one launch";
  RmsNormKernel<<<static_cast<unsigned>(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, weight, dim, eps, y);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string RmsNormFromHost(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                            float* y) {
  if (n < 0 || dim < 1) return "bad RMSNorm shape";
  if (n == 0) return {};
  const size_t bytes = static_cast<size_t>(n * dim) * sizeof(float);
  DeviceBuffer dx, dw;
  if (std::string e = dx.CopyIn(x, bytes); !e.empty()) return e;
  if (weight != nullptr) {
    if (std::string e = dw.CopyIn(weight, static_cast<size_t>(dim) * sizeof(float)); !e.empty()) {
      return e;
    }
  }
  auto* px = static_cast<float*>(dx.p);
  if (std::string e = RmsNorm(px, static_cast<const float*>(dw.p), n, dim, eps, px, nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  return dx.CopyOut(y, bytes);
}

}  // namespace moe::cuda
