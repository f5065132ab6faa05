// Launchers of the CUDA RMSNorm (rms_norm.cu), by the CPU backend's core
// (lib/backend/norm_core.h). Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstdint>
#include <string>

namespace moe::cuda {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight for n rows of dim, all in device memory (in
// place allowed). Queued on `stream` (a cudaStream_t; null: the default stream) without
// waiting: the error returned is the launch's.
std::string RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                    float* y, void* stream);

// The same from and to host memory (copied over and back, then waits): for the GPU tests.
std::string RmsNormFromHost(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                            float* y);

}  // namespace moe::cuda
