// Launchers of the prompt-sized matrix products through cuBLAS (gemm.cu): float weights as they
// are, and quantized weights dequantized to F16 by the CPU's block decoders then multiplied by
// cuBLAS in F16 with F32 sums (the "dequantize-to-F16 + cuBLAS" path of issue 21; a custom
// tiled integer kernel is the alternative to measure against, once a GPU is lent). Plain C++;
// errors come back as text (empty: success).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/base/dtype_enum.h"

namespace moe::cuda {

// A cuBLAS handle, opaque here (void* so that callers need no CUDA headers). Made once per
// stream and reused: creating one costs milliseconds.
class BlasHandle {
 public:
  BlasHandle() = default;
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  ~BlasHandle();
  // Creates the handle on `stream` (a cudaStream_t; null: the default stream).
  std::string Create(void* stream);
  void* get() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// y[t] = W x[t] for n tokens: W rows x cols F32, x n x cols, y n x rows, row-major, all in
// device memory. Asynchronous on the handle's stream.
std::string GemmF32(const BlasHandle& blas, const float* w, int64_t rows, int64_t cols,
                    const float* x, int64_t n, float* y);

// The same for W of quantized type t (GGUF blocks as stored): W is decoded to F16 into
// w_scratch (rows x cols halves), x converted to F16 into x_scratch (n x cols halves), then
// multiplied with F32 accumulation. Asynchronous on the handle's stream.
std::string GemmQuantF16(const BlasHandle& blas, DType t, const void* w, int64_t rows, int64_t cols,
                         const float* x, int64_t n, float* y, void* w_scratch, void* x_scratch);

// Both from and to host memory (copied over and back, then waits): for the GPU tests. t = kF32
// runs GemmF32 (w_bytes = rows x cols x 4), a quantized t GemmQuantF16.
std::string GemmFromHost(DType t, const void* w, size_t w_bytes, int64_t rows, int64_t cols,
                         const float* x, int64_t n, float* y);

}  // namespace moe::cuda
