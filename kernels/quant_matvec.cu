// The quantized matrix-vector product on the GPU through the numeric core the CPU backend uses
// (lib/backend/block_dot.h), one thread per row: a reference to hold the fast kernels to, built
// with --fmad=false so every product rounds as on the CPU.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/quant_matvec.h"
#include "lib/backend/block_dot.h"
#include "lib/backend/q8_quantize.h"

namespace moe::cuda {
namespace {

__global__ void QuantMatVecKernel(DType t, const uint8_t* w, int64_t row_bytes, const Q8Block* x,
                                  float* y, int64_t rows, int64_t cols) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) QuantDotRow(t, w + r * row_bytes, x, cols, &y[r]);
}

__global__ void QuantizeKernel(const float* x, int64_t spans, int64_t span, Q8Block* out) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s < spans) QuantizeQ8Span(x + 32 * span * s, span, out + span * s);
}

constexpr int kThreads = 128;

// A product of host weights and activations on the device: copies them over, runs
// product(device w, device x, device y) (which waits for its kernel), copies y back.
template <typename Product>
std::string ProductFromHost(Product product, const void* w, size_t w_bytes, const Q8Block* x,
                            float* y, int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0 || cols % 32 != 0) return "rows of whole blocks needed";
  DeviceBuffer dw, dx, dy;
  const size_t x_bytes = static_cast<size_t>(cols / 32) * sizeof(Q8Block);
  const size_t y_bytes = static_cast<size_t>(rows) * sizeof(float);
  if (std::string e = dw.CopyIn(w, w_bytes); !e.empty()) return e;
  if (std::string e = dx.CopyIn(x, x_bytes); !e.empty()) return e;
  if (std::string e = dy.Allocate(y_bytes); !e.empty()) return e;
  if (std::string e = product(dw.p, static_cast<const Q8Block*>(dx.p), static_cast<float*>(dy.p));
      !e.empty()) {
    return e;
  }
  return dy.CopyOut(y, y_bytes);
}

// Lanes per row: the row's blocks rounded up to a power of two, at most a warp.
int LanesPerRow(int64_t blocks) {
  int lanes = 1;
  while (lanes < 32 && lanes < blocks) lanes *= 2;
  return lanes;
}

__global__ void QuantMatVecWarpKernel(DType t, const uint8_t* w, int64_t row_bytes,
                                      BlockShape shape, const Q8Block* x, float* y, int64_t rows,
                                      int64_t cols, int lanes) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r = thread / lanes;
  const int lane = static_cast<int>(thread % lanes);
  const int64_t blocks = cols / shape.elems;
  const int64_t acts_per_block = shape.elems / 32;  // activation blocks per weight block
  float sum = 0.f;
  if (r < rows) {
    const uint8_t* row = w + r * row_bytes;
    for (int64_t b = lane; b < blocks; b += lanes) {
      float part;
      QuantDotRow(t, row + b * shape.bytes, x + b * acts_per_block, shape.elems, &part);
      sum += part;
    }
  }
  // Every lane of the warp takes part in the shuffles (rows past the end add zeros).
  for (int o = lanes / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (r < rows && lane == 0) y[r] = sum;
}

}  // namespace

std::string QuantizeActivationsOn(const float* x, int64_t n, int64_t span, Q8Block* out,
                                  void* stream) {
  if (span < 1 || n < 0 || n % (32 * span) != 0) return "activations of whole spans needed";
  const int64_t spans = n / (32 * span);
  if (spans == 0) return {};
  const int64_t grid = (spans + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many activations for one launch";
  QuantizeKernel<<<static_cast<unsigned>(grid), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, spans, span, out);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string QuantizeActivations(const float* x, int64_t n, int64_t span, Q8Block* out) {
  if (std::string e = QuantizeActivationsOn(x, n, span, out, nullptr); !e.empty()) return e;
  return Synchronize();
}

std::string QuantMatVecF32FromHost(DType t, const void* w, size_t w_bytes, const float* x, float* y,
                                   int64_t rows, int64_t cols) {
  const BlockShape s = QuantBlockShape(t);
  if (s.elems == 0) return "not a quantized block type";
  if (rows < 0 || cols <= 0 || cols % s.elems != 0) return "rows of whole blocks needed";
  DeviceBuffer dw, dx, dq, dy;
  const size_t x_bytes = static_cast<size_t>(cols) * sizeof(float);
  const size_t q_bytes = static_cast<size_t>(cols / 32) * sizeof(Q8Block);
  const size_t y_bytes = static_cast<size_t>(rows) * sizeof(float);
  if (std::string e = dw.CopyIn(w, w_bytes); !e.empty()) return e;
  if (std::string e = dx.CopyIn(x, x_bytes); !e.empty()) return e;
  if (std::string e = dq.Allocate(q_bytes); !e.empty()) return e;
  if (std::string e = dy.Allocate(y_bytes); !e.empty()) return e;
  // K-quant weights take activations with one scale per super-block, as on the CPU.
  const int64_t span = s.elems == 256 ? 8 : 1;
  auto* q = static_cast<Q8Block*>(dq.p);
  if (std::string e = QuantizeActivations(static_cast<const float*>(dx.p), cols, span, q);
      !e.empty()) {
    return e;
  }
  if (std::string e = QuantMatVec(t, dw.p, q, static_cast<float*>(dy.p), rows, cols); !e.empty()) {
    return e;
  }
  return dy.CopyOut(y, y_bytes);
}

std::string QuantMatVec(DType t, const void* w, const Q8Block* x, float* y, int64_t rows,
                        int64_t cols) {
  const BlockShape s = QuantBlockShape(t);
  if (s.elems == 0) return "not a quantized block type";
  if (rows < 0 || cols <= 0 || cols % s.elems != 0) return "rows of whole blocks needed";
  if (rows == 0) return {};
  const int64_t grid = (rows + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many rows for one launch";
  QuantMatVecKernel<<<static_cast<unsigned>(grid), kThreads>>>(
      t, static_cast<const uint8_t*>(w), cols / s.elems * s.bytes, x, y, rows, cols);
  return Synchronize();
}

std::string QuantMatVecFromHost(DType t, const void* w, size_t w_bytes, const Q8Block* x, float* y,
                                int64_t rows, int64_t cols) {
  return ProductFromHost([&](const void* dw, const Q8Block* dx,
                             float* dy) { return QuantMatVec(t, dw, dx, dy, rows, cols); },
                         w, w_bytes, x, y, rows, cols);
}

std::string QuantMatVecWarp(DType t, const void* w, const Q8Block* x, float* y, int64_t rows,
                            int64_t cols, void* stream) {
  const BlockShape s = QuantBlockShape(t);
  if (s.elems == 0) return "not a quantized block type";
  if (rows < 0 || cols <= 0 || cols % s.elems != 0) return "rows of whole blocks needed";
  if (rows == 0) return {};
  const int lanes = LanesPerRow(cols / s.elems);
  const int64_t threads = rows * lanes;
  const int64_t grid = (threads + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many rows for one launch";
  QuantMatVecWarpKernel<<<static_cast<unsigned>(grid), kThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(
      t, static_cast<const uint8_t*>(w), cols / s.elems * s.bytes, s, x, y, rows, cols, lanes);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string QuantMatVecWarpFromHost(DType t, const void* w, size_t w_bytes, const Q8Block* x,
                                    float* y, int64_t rows, int64_t cols) {
  return ProductFromHost(
      [&](const void* dw, const Q8Block* dx, float* dy) {
        std::string e = QuantMatVecWarp(t, dw, dx, dy, rows, cols, nullptr);
        return e.empty() ? Synchronize() : e;
      },
      w, w_bytes, x, y, rows, cols);
}

}  // namespace moe::cuda
