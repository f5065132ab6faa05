// Floats to IEEE half precision (round to nearest even, overflow to inf, subnormals kept), as
// the KV cache stores them: a prompt batch writes every layer's K and V rows at once, where a
// scalar conversion per element was a visible share of the step.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {

using ToHalvesFn = void (*)(const float* x, int64_t n, uint16_t* out);

// Equal to FloatToHalf (lib/base/half.h) on every input except NaN payloads: NaN stays NaN.
ToHalvesFn GetToHalves(SimdLevel level);

namespace kernels {
void ToHalvesPortable(const float* x, int64_t n, uint16_t* out);
void ToHalvesF16c(const float* x, int64_t n, uint16_t* out);  // AVX2 + F16C
}  // namespace kernels

}  // namespace moe
