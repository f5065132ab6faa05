#include "lib/backend/cpu/exp_sum.h"

#include <cmath>

namespace moe {
namespace kernels {

double ExpSumPortable(const float* x, int64_t n, float max, float inv_temperature, float ceiling) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] <= ceiling) sum += std::exp((x[i] - max) * inv_temperature);
  }
  return sum;
}

}  // namespace kernels

ExpSumFn GetExpSum(SimdLevel level) {
  if (level >= SimdLevel::kAvx512) return kernels::ExpSumAvx512;
  return level >= SimdLevel::kAvx2 ? kernels::ExpSumAvx2 : kernels::ExpSumPortable;
}

}  // namespace moe
