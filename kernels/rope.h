// Launchers of the CUDA rotary position encoding (rope.cu), by the core the CPU backend runs
// (lib/backend/rope_core.h). Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstdint>
#include <string>

#include "lib/backend/rope_core.h"

namespace moe::cuda {

// Rotates n rows of n_heads x head_dim in device memory x in place; row t is at positions[t]
// (device memory). Queued on `stream` (a cudaStream_t; null: the default stream) without
// waiting: the error returned is the launch's.
std::string Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                 const RopeParams& rope, void* stream);

// The same from and to host memory (x, positions and the frequency factors copied over, x back,
// then waits): for the GPU tests.
std::string RopeFromHost(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                         const int32_t* positions, const RopeParams& rope);

}  // namespace moe::cuda
