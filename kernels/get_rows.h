// Launchers of the CUDA embedding-row gather (get_rows.cu): rows of a weight table as stored in
// the model file (F32, F16, BF16 or a quantized GGUF block type) decoded to floats by the CPU's
// block decoders (lib/backend/block_decode.h). Plain C++; errors come back as text (empty:
// success).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/base/dtype_enum.h"

namespace moe::cuda {

// dst row t = row ids[t] of `table` (rows x cols of type t), for t < n, all in device memory. An
// id outside [0, rows) gives a row of zeros (the caller checks ids first; this keeps a bad one
// from reading past the table). Queued on `stream` (a cudaStream_t; null: the default stream)
// without waiting: the error returned is the launch's.
std::string GetRows(DType t, const void* table, int64_t rows, int64_t cols, const int32_t* ids,
                    int64_t n, float* dst, void* stream);

// The same from and to host memory (copied over and back, then waits): for the GPU tests.
std::string GetRowsFromHost(DType t, const void* table, size_t table_bytes, int64_t rows,
                            int64_t cols, const int32_t* ids, int64_t n, float* dst);

}  // namespace moe::cuda
