// Quantized blocks to floats on the GPU, one thread per block, through the numeric core the CPU
// backend uses (lib/backend/block_decode.h): built with --fmad=false, so no multiply-add is
// fused that the CPU computes as two roundings, and the results are the CPU's bit for bit.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/dequantize.h"
#include "lib/backend/block_decode.h"

namespace moe::cuda {
namespace {

__global__ void DequantizeKernel(DType t, const uint8_t* src, float* dst, int64_t cols,
                                 int64_t blocks) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < blocks) DecodeBlockAt(t, src, dst, cols, index);
}

}  // namespace

int DeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = CudaError("no CUDA device", e);
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
  return Synchronize();
}

std::string DequantizeRowsFromHost(DType t, const void* src, size_t src_bytes, float* dst,
                                   int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0) return "rows of whole blocks needed";
  const size_t out_bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols) * sizeof(float);
  DeviceBuffer in, out;
  if (std::string e = in.CopyIn(src, src_bytes); !e.empty()) return e;
  if (std::string e = out.Allocate(out_bytes); !e.empty()) return e;
  if (std::string e = DequantizeRows(t, in.p, static_cast<float*>(out.p), rows, cols); !e.empty()) {
    return e;
  }
  return out.CopyOut(dst, out_bytes);
}

}  // namespace moe::cuda
