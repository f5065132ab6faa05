// The gated FFN activation out[i] = silu(gate[i]) * up[i] = gate / (1 + e^-gate) * up, run on
// every expert's gate/up outputs: with one exponential per element it is worth a vector exp.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {

using SiluMulFn = void (*)(const float* gate, const float* up, float* out, int64_t n);

SiluMulFn GetSiluMul(SimdLevel level);

// gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai, alpha 1.702, limit 7):
// out = g' sigmoid(1.702 g') (u' + 1), g' = min(gate, 7), u' = clamp(up, -7, 7); the same
// vector exp as SiLU's where the level has one.
SiluMulFn GetSwigluClamped(SimdLevel level);

namespace kernels {
void SiluMulPortable(const float* gate, const float* up, float* out, int64_t n);
// e^x in 16 lanes: within 2 ulp of std::exp over the float range; inf, 0 and NaN as std::exp.
void SiluMulAvx512(const float* gate, const float* up, float* out, int64_t n);
// The same in 8 lanes (AVX2 + FMA).
void SiluMulAvx2(const float* gate, const float* up, float* out, int64_t n);
void SwigluClampedPortable(const float* gate, const float* up, float* out, int64_t n);
void SwigluClampedAvx512(const float* gate, const float* up, float* out, int64_t n);
void SwigluClampedAvx2(const float* gate, const float* up, float* out, int64_t n);
}  // namespace kernels

}  // namespace moe
