#include "lib/backend/cpu/half_rows.h"

#include "lib/base/half.h"

namespace moe {
namespace kernels {

void ToHalvesPortable(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(x[i]);
}

}  // namespace kernels

ToHalvesFn GetToHalves(SimdLevel level) {
  return level >= SimdLevel::kAvx2 ? kernels::ToHalvesF16c : kernels::ToHalvesPortable;
}

}  // namespace moe
