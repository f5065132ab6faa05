// Launchers of the CUDA element-wise operations the backend needs besides the named kernels:
// y += a x (the residual adds), x *= a, and a bias added to every row. Plain C++; errors come back
// as text (empty: success). Queued on `stream` (a cudaStream_t; null: the default stream) without
// waiting.
#pragma once

#include <cstdint>
#include <string>

namespace moe::cuda {

// y[i] += a * x[i], i < count (device memory), in the CPU backend's order of roundings.
std::string Axpy(float a, const float* x, int64_t count, float* y, void* stream);

// x[i] *= a, i < count (device memory).
std::string Scale(float a, float* x, int64_t count, void* stream);

// x[t * dim + i] *= scales[t] for t < n (device memory).
std::string ScaleRows(float* x, int64_t n, int64_t dim, const float* scales, void* stream);

// x[t * dim + i] += bias[i] for t < n (device memory).
std::string AddBias(float* x, const float* bias, int64_t n, int64_t dim, void* stream);

}  // namespace moe::cuda
