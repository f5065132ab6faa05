// Launchers of the CUDA gated feed-forward activations (gated_activation.cu), by the element
// functions the CPU's portable kernels run (lib/backend/activation_core.h). Plain C++; errors
// come back as text (empty: success).
#pragma once

#include <cstdint>
#include <string>

namespace moe::cuda {

enum class GatedActivationKind { kSiluMul, kSwigluClamped };

// out[i] = act(gate[i], up[i]) for i < n, all in device memory (out may be gate or up). Queued
// on `stream` (a cudaStream_t; null: the default stream) without waiting: the error returned is
// the launch's.
std::string GatedActivation(GatedActivationKind kind, const float* gate, const float* up,
                            float* out, int64_t n, void* stream);

// The same from and to host memory (copied over and back, then waits): for the GPU tests.
std::string GatedActivationFromHost(GatedActivationKind kind, const float* gate, const float* up,
                                    float* out, int64_t n);

}  // namespace moe::cuda
