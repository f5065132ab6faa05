#include "lib/backend/cpu/silu_mul.h"

#include <algorithm>
#include <cmath>

namespace moe {
namespace kernels {

void SiluMulPortable(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace kernels

SiluMulFn GetSiluMul(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::SiluMulAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::SiluMulAvx2 : kernels::SiluMulPortable;
}

void SwigluClamped(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = g / (1.f + std::exp(kAlpha * -g)) * (u + 1.f);
  }
}

}  // namespace moe
