#include "lib/backend/cpu/dot_kernels.h"

namespace moe {

bool IsQuantized(DType t) { return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16; }

QuantDotFn GetQuantDot(DType t, SimdLevel level) {
  QuantDotFn f = nullptr;
  switch (level) {
    case SimdLevel::kAvx512Vnni:
      f = kernels::Avx512VnniQuantDot(t);
      break;
    case SimdLevel::kAvx512:  // no 512-bit gain without VNNI for these kernels
    case SimdLevel::kAvxVnni:
    case SimdLevel::kAvx2:
      f = kernels::Avx2QuantDot(t);
      break;
    case SimdLevel::kScalar:
      break;
  }
  // A level without its own kernel for a type (the run-time layouts below AVX-512 VNNI) uses
  // the portable one.
  return f != nullptr ? f : kernels::ScalarQuantDot(t);
}

void FillQ8Aux(const Q8Block* blocks, int64_t count, float* d, float* sum, float* sum16) {
  for (int64_t b = 0; b < count; ++b) {
    d[b] = blocks[b].d;
    sum[b] = static_cast<float>(blocks[b].sum[0] + blocks[b].sum[1]);
    sum16[2 * b] = blocks[b].sum[0];
    sum16[2 * b + 1] = blocks[b].sum[1];
  }
}

SplitQuantDotFn GetSplitQuantDot(DType t, SimdLevel level) {
  return level >= SimdLevel::kAvx512Vnni ? kernels::Avx512VnniSplitQuantDot(t) : nullptr;
}

FloatDotFn GetFloatDot(DType t, SimdLevel level) {
  return level >= SimdLevel::kAvx2 ? kernels::Avx2FloatDot(t) : kernels::ScalarFloatDot(t);
}

}  // namespace moe
