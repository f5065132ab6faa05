#include "lib/backend/cpu/exp_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace moe {
namespace {

// Every level's sum against one in double precision: terms within the vector exp's few ulp,
// only those at or below the ceiling, NaN never, -inf as 0, every tail length.
TEST(ExpSumTest, EveryLevelSumsTheTermsAtOrBelowTheCeiling) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 4);
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!CpuSupportsLevel(level)) continue;
    const ExpSumFn sum = GetExpSum(level);
    for (int64_t n : {1, 5, 8, 15, 16, 17, 33, 1000, 32001}) {
      std::vector<float> x(n);
      for (float& v : x) v = nd(rng);
      if (n > 4) {
        x[1] = NAN;
        x[2] = -INFINITY;
      }
      const float max = 3.0f, inv_t = 1.25f;
      for (float ceiling : {INFINITY, 1.0f, -2.0f}) {
        double want = 0;
        for (float v : x) {
          if (v <= ceiling) want += std::exp((static_cast<double>(v) - max) * inv_t);
        }
        EXPECT_NEAR(sum(x.data(), n, max, inv_t, ceiling), want, 1e-6 * want + 1e-30)
            << CpuSimdLevelName(level) << " n " << n << " ceiling " << ceiling;
      }
    }
  }
}

}  // namespace
}  // namespace moe
