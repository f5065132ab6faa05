// The vector SiLU x up agrees with the portable one (std::exp) to a few ulp over the whole float
// range, and at the edges: +-inf, NaN, zero, exponentials that overflow or underflow.
#include "lib/backend/cpu/silu_mul.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(SiluMulTest, VectorExpMatchesStdExp) {
  if (DetectedSimdLevel() < SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> g, u;
  for (int i = 0; i < 20000; ++i) {
    g.push_back(i % 2 ? wide(rng) : nd(rng));
    u.push_back(nd(rng));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 89.5f, -89.5f, 103.0f, -103.0f,
                  200.0f, -200.0f, inf, -inf}) {
    g.push_back(v);
    u.push_back(1.5f);
  }
  g.push_back(std::numeric_limits<float>::quiet_NaN());
  u.push_back(1.0f);
  const int64_t n = static_cast<int64_t>(g.size());  // not a multiple of 16: the tail runs too
  std::vector<float> want(n);
  kernels::SiluMulPortable(g.data(), u.data(), want.data(), n);
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > DetectedSimdLevel()) continue;
    std::vector<float> got(n);
    GetSiluMul(level)(g.data(), u.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << CpuSimdLevelName(level) << " gate " << g[i];
        continue;
      }
      if (std::isinf(want[i])) {
        EXPECT_EQ(got[i], want[i]) << CpuSimdLevelName(level) << " gate " << g[i];
        continue;
      }
      EXPECT_NEAR(got[i], want[i], 4e-7f * std::fabs(want[i]) + 1e-37f)
          << CpuSimdLevelName(level) << " gate " << g[i] << " up " << u[i];
    }
  }
}

}  // namespace
}  // namespace moe
