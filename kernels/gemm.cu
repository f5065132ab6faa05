// Prompt-sized products through cuBLAS. Row-major y (n x rows) = x (n x cols) W^T is, in cuBLAS's
// column-major terms, y^T (rows x n) = W (stored as cols x rows, transposed) x^T (cols x n).
// Quantized W is first decoded block by block (block_decode.h) and rounded to F16 as the CPU's
// FloatToHalf does; sums are F32 (CUBLAS_COMPUTE_32F).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/gemm.h"
#include "lib/backend/block_decode.h"
#include "lib/base/half.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 128;

std::string BlasError(const char* what, cublasStatus_t s) {
  return std::string(what) + ": " + cublasGetStatusString(s);
}

__global__ void DecodeToHalfKernel(DType t, const uint8_t* w, int64_t cols, int64_t blocks,
                                   uint16_t* out) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= blocks) return;
  const BlockShape s = QuantBlockShape(t);
  float values[256];
  const int64_t per_row = cols / s.elems, row = index / per_row, block = index % per_row;
  DecodeQuantBlock(t, w + index * s.bytes, values);
  uint16_t* dst = out + row * cols + block * s.elems;
  for (int i = 0; i < s.elems; ++i) dst[i] = FloatToHalf(values[i]);
}

__global__ void ToHalfKernel(const float* x, int64_t count, uint16_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = FloatToHalf(x[i]);
}

unsigned GridFor(int64_t work) { return static_cast<unsigned>((work + kThreads - 1) / kThreads); }

std::string CheckGemm(int64_t rows, int64_t cols, int64_t n) {
  if (rows < 0 || cols <= 0 || n < 0) return "bad product shape";
  if (rows > 0x7fffffff || cols > 0x7fffffff || n > 0x7fffffff)
    return "product too large for cuBLAS";
  return {};
}

cudaStream_t StreamOf(const BlasHandle& blas) {
  cudaStream_t s = nullptr;
  cublasGetStream(static_cast<cublasHandle_t>(blas.get()), &s);
  return s;
}

}  // namespace

BlasHandle::~BlasHandle() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

std::string BlasHandle::Create(void* stream) {
  cublasHandle_t h = nullptr;
  if (cublasStatus_t s = cublasCreate(&h); s != CUBLAS_STATUS_SUCCESS) {
    return BlasError("cublasCreate", s);
  }
  handle_ = h;
  if (cublasStatus_t s = cublasSetStream(h, static_cast<cudaStream_t>(stream));
      s != CUBLAS_STATUS_SUCCESS) {
    return BlasError("cublasSetStream", s);
  }
  return {};
}

std::string GemmF32(const BlasHandle& blas, const float* w, int64_t rows, int64_t cols,
                    const float* x, int64_t n, float* y) {
  if (std::string e = CheckGemm(rows, cols, n); !e.empty()) return e;
  if (rows == 0 || n == 0) return {};
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t s = cublasSgemm(static_cast<cublasHandle_t>(blas.get()), CUBLAS_OP_T,
                                       CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
                                       static_cast<int>(cols), &one, w, static_cast<int>(cols), x,
                                       static_cast<int>(cols), &zero, y, static_cast<int>(rows));
  return s == CUBLAS_STATUS_SUCCESS ? std::string() : BlasError("cublasSgemm", s);
}

std::string GemmQuantF16(const BlasHandle& blas, DType t, const void* w, int64_t rows, int64_t cols,
                         const float* x, int64_t n, float* y, void* w_scratch, void* x_scratch) {
  if (std::string e = CheckGemm(rows, cols, n); !e.empty()) return e;
  const BlockShape shape = QuantBlockShape(t);
  if (shape.elems == 0) return "not a quantized block type";
  if (cols % shape.elems != 0) return "rows of whole blocks needed";
  if (rows == 0 || n == 0) return {};
  const cudaStream_t stream = StreamOf(blas);
  const int64_t blocks = rows * (cols / shape.elems);
  DecodeToHalfKernel<<<GridFor(blocks), kThreads, 0, stream>>>(
      t, static_cast<const uint8_t*>(w), cols, blocks, static_cast<uint16_t*>(w_scratch));
  ToHalfKernel<<<GridFor(n * cols), kThreads, 0, stream>>>(x, n * cols,
                                                           static_cast<uint16_t*>(x_scratch));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t s = cublasGemmEx(
      static_cast<cublasHandle_t>(blas.get()), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
      static_cast<int>(n), static_cast<int>(cols), &one, w_scratch, CUDA_R_16F,
      static_cast<int>(cols), x_scratch, CUDA_R_16F, static_cast<int>(cols), &zero, y, CUDA_R_32F,
      static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return s == CUBLAS_STATUS_SUCCESS ? std::string() : BlasError("cublasGemmEx", s);
}

std::string GemmFromHost(DType t, const void* w, size_t w_bytes, int64_t rows, int64_t cols,
                         const float* x, int64_t n, float* y) {
  if (std::string e = CheckGemm(rows, cols, n); !e.empty()) return e;
  if (t != DType::kF32 && QuantBlockShape(t).elems == 0) return "not F32 or a quantized type";
  if (rows == 0 || n == 0) return {};
  BlasHandle blas;
  if (std::string e = blas.Create(nullptr); !e.empty()) return e;
  DeviceBuffer dw, dx, dy, w16, x16;
  const size_t x_bytes = static_cast<size_t>(n * cols) * sizeof(float);
  const size_t y_bytes = static_cast<size_t>(n * rows) * sizeof(float);
  if (std::string e = dw.CopyIn(w, w_bytes); !e.empty()) return e;
  if (std::string e = dx.CopyIn(x, x_bytes); !e.empty()) return e;
  if (std::string e = dy.Allocate(y_bytes); !e.empty()) return e;
  std::string err;
  if (t == DType::kF32) {
    err = GemmF32(blas, static_cast<const float*>(dw.p), rows, cols,
                  static_cast<const float*>(dx.p), n, static_cast<float*>(dy.p));
  } else {
    if (std::string e = w16.Allocate(static_cast<size_t>(rows * cols) * 2); !e.empty()) return e;
    if (std::string e = x16.Allocate(static_cast<size_t>(n * cols) * 2); !e.empty()) return e;
    err = GemmQuantF16(blas, t, dw.p, rows, cols, static_cast<const float*>(dx.p), n,
                       static_cast<float*>(dy.p), w16.p, x16.p);
  }
  if (!err.empty()) return err;
  if (std::string e = Synchronize(); !e.empty()) return e;
  return dy.CopyOut(y, y_bytes);
}

}  // namespace moe::cuda
