// Launchers of the CUDA quantized matrix-vector product (quant_matvec.cu): a quantized weight
// matrix times activations quantized to 8 bits (Q8Block, as the CPU backend makes them). Plain
// C++; errors come back as text (empty: success).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/backend/cpu/q8_activations.h"
#include "lib/base/dtype_enum.h"

namespace moe::cuda {

// y[r] = row r of w (rows x cols, quantized file type t) . x (cols / 32 blocks), all in device
// memory; waits for the result. The reference kernel: one thread per row, the CPU's portable
// arithmetic in the CPU's order (block_dot.h), so the result is the CPU's bit for bit.
std::string QuantMatVec(DType t, const void* w, const Q8Block* x, float* y, int64_t rows,
                        int64_t cols);

// The same product for decode: the blocks of a row are shared out among a segment of a warp's
// lanes (as many as the row has blocks, up to 32; the other segments take the next rows), each
// lane summing its blocks by the same block arithmetic (block_dot.h), then the segment adds its
// lanes' sums: neighbouring lanes read neighbouring blocks, so a warp's reads are contiguous.
// Only the order of the float sum over blocks differs from QuantMatVec. Queued on `stream` (a
// cudaStream_t; null: the default stream) without waiting: the error returned is the launch's.
std::string QuantMatVecWarp(DType t, const void* w, const Q8Block* x, float* y, int64_t rows,
                            int64_t cols, void* stream);

// QuantMatVecWarp from and to host memory (copied over and back, then waits): for the GPU tests.
std::string QuantMatVecWarpFromHost(DType t, const void* w, size_t w_bytes, const Q8Block* x,
                                    float* y, int64_t rows, int64_t cols);

// Activations x (n floats, device memory) to 8-bit blocks out (n / 32), `span` blocks sharing a
// scale (1, or 8 for K-quant weights: BlocksPerScale), one thread per span, as the CPU's
// QuantizeActivations does bit for bit.
// Waits for the device.
std::string QuantizeActivations(const float* x, int64_t n, int64_t span, Q8Block* out);
// The same queued on `stream` (a cudaStream_t; null: the default stream) without waiting: the
// error returned is the launch's.
std::string QuantizeActivationsOn(const float* x, int64_t n, int64_t span, Q8Block* out,
                                  void* stream);

// y = w . x for float activations x, quantized on the device first (span as the CPU picks it
// for t), all from and to host memory: the decode path of a matrix, for tests and checks.
std::string QuantMatVecF32FromHost(DType t, const void* w, size_t w_bytes, const float* x, float* y,
                                   int64_t rows, int64_t cols);

// The same from and to host memory: for the GPU tests and checks.
std::string QuantMatVecFromHost(DType t, const void* w, size_t w_bytes, const Q8Block* x, float* y,
                                int64_t rows, int64_t cols);

}  // namespace moe::cuda
