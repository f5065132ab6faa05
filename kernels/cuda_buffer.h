// What the launchers share: a device allocation freed when it goes, host copies in and out, and
// the wait for a launch, each reporting CUDA's error as text (empty: success). CUDA code only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace moe::cuda {

inline std::string CudaError(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

// The launch's own error, then the kernel's.
inline std::string Synchronize() {
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return CudaError("kernel", e);
  return {};
}

struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  std::string Allocate(size_t bytes) {
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return CudaError("malloc", e);
    return {};
  }
  std::string CopyIn(const void* host, size_t bytes) {
    if (std::string e = Allocate(bytes); !e.empty()) return e;
    if (cudaError_t e = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
      return CudaError("copy in", e);
    }
    return {};
  }
  std::string CopyOut(void* host, size_t bytes) const {
    if (cudaError_t e = cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
      return CudaError("copy out", e);
    }
    return {};
  }
};

}  // namespace moe::cuda
