#include "lib/backend/cpu/silu_mul.h"

#include "lib/backend/activation_core.h"

namespace moe {
namespace kernels {

void SiluMulPortable(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = SiluMulElement(gate[i], up[i]);
}

void SwigluClampedPortable(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = SwigluClampedElement(gate[i], up[i]);
}

}  // namespace kernels

SiluMulFn GetSiluMul(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::SiluMulAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::SiluMulAvx2 : kernels::SiluMulPortable;
}

SiluMulFn GetSwigluClamped(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::SwigluClampedAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::SwigluClampedAvx2 : kernels::SwigluClampedPortable;
}

}  // namespace moe
