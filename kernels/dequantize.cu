// Quantized blocks to floats on the GPU, one thread per block, through the numeric core the CPU
// backend uses (lib/backend/block_decode.h): built with --fmad=false, so no multiply-add is
// fused that the CPU computes as two roundings, and the results are the CPU's bit for bit.
#include <cuda_runtime.h>

#include "kernels/dequantize.h"
#include "lib/backend/block_decode.h"

namespace moe::cuda {
namespace {

__global__ void DequantizeKernel(DType t, const uint8_t* src, float* dst, int64_t cols,
                                 int64_t blocks) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < blocks) DecodeBlockAt(t, src, dst, cols, index);
}

std::string Error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

// Frees a device allocation when it goes.
struct DeviceBuffer {
  void* p = nullptr;
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
};

}  // namespace

int DeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = Error("no CUDA device", e);
    cudaGetLastError();  // not sticky: later calls may still try
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "no CUDA device";
  return n;
}

std::string DequantizeRows(DType t, const void* src, float* dst, int64_t rows, int64_t cols) {
  const BlockShape s = QuantBlockShape(t);
  if (s.elems == 0) return "not a quantized block type";
  if (rows < 0 || cols <= 0 || cols % s.elems != 0) return "rows of whole blocks needed";
  const int64_t blocks = rows * (cols / s.elems);
  if (blocks == 0) return {};
  constexpr int kThreads = 128;
  const int64_t grid = (blocks + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many blocks for one launch";
  DequantizeKernel<<<static_cast<unsigned>(grid), kThreads>>>(t, static_cast<const uint8_t*>(src),
                                                              dst, cols, blocks);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return Error("launch", e);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return Error("kernel", e);
  return {};
}

std::string DequantizeRowsFromHost(DType t, const void* src, size_t src_bytes, float* dst,
                                   int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0) return "rows of whole blocks needed";
  const size_t out_bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols) * sizeof(float);
  DeviceBuffer in, out;
  if (cudaError_t e = cudaMalloc(&in.p, src_bytes); e != cudaSuccess) return Error("malloc", e);
  if (cudaError_t e = cudaMalloc(&out.p, out_bytes); e != cudaSuccess) return Error("malloc", e);
  if (cudaError_t e = cudaMemcpy(in.p, src, src_bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    return Error("copy in", e);
  }
  if (std::string err = DequantizeRows(t, in.p, static_cast<float*>(out.p), rows, cols);
      !err.empty()) {
    return err;
  }
  if (cudaError_t e = cudaMemcpy(dst, out.p, out_bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    return Error("copy out", e);
  }
  return {};
}

}  // namespace moe::cuda
