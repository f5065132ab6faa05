// Launchers of the CUDA dequantization kernel (dequantize.cu): plain C++, no CUDA types, so any
// translation unit may call them. Errors come back as text (empty: success).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/base/dtype_enum.h"

namespace moe::cuda {

// The CUDA devices this process can use; 0, with the reason in *why, when there are none (no
// driver, no device, or a driver older than this toolkit).
int DeviceCount(std::string* why);

// Decodes rows x cols values of the quantized file type t (Q8_0, Q4_0, MXFP4, Q2_K..Q6_K) from
// device memory src into the device floats dst, one thread per block, and waits for it.
std::string DequantizeRows(DType t, const void* src, float* dst, int64_t rows, int64_t cols);

// The same from and to host memory (copied over and back): for the GPU tests and checks.
std::string DequantizeRowsFromHost(DType t, const void* src, size_t src_bytes, float* dst,
                                   int64_t rows, int64_t cols);

}  // namespace moe::cuda
