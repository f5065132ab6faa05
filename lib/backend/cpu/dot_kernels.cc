#include "lib/backend/cpu/dot_kernels.h"

namespace moe {

bool IsQuantized(DType t) { return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16; }

QuantDotFn GetQuantDot(DType t, SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512Vnni:
      return kernels::Avx512VnniQuantDot(t);
    case SimdLevel::kAvx512:  // no 512-bit gain without VNNI for these kernels
    case SimdLevel::kAvx2:
      return kernels::Avx2QuantDot(t);
    case SimdLevel::kScalar:
      break;
  }
  return kernels::ScalarQuantDot(t);
}

FloatDotFn GetFloatDot(DType t, SimdLevel level) {
  return level >= SimdLevel::kAvx2 ? kernels::Avx2FloatDot(t) : kernels::ScalarFloatDot(t);
}

}  // namespace moe
