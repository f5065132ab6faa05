// The vector SiLU x up and clamped SwiGLU agree with the portable ones (std::exp) to a few ulp
// over the whole float range, and at the edges: +-inf, NaN, zero, exponentials that overflow or
// underflow, the clamps.
#include "lib/backend/cpu/silu_mul.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

// Each level's kernel against the portable result: NaN where it is NaN, the same infinity where
// it is infinite, otherwise within a few ulp.
void ExpectLevelsMatch(SiluMulFn (*get)(SimdLevel), const std::vector<float>& g,
                       const std::vector<float>& u, const std::vector<float>& want) {
  const int64_t n = static_cast<int64_t>(g.size());
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > DetectedSimdLevel()) continue;
    std::vector<float> got(n);
    get(level)(g.data(), u.data(), got.data(), n);
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
  ExpectLevelsMatch(GetSiluMul, g, u, want);
}

// gpt-oss's clamped SwiGLU: the vector kernels agree with the element function (std::exp) to a
// few ulp, clamp at +-7 as it does (the edges and infinities included) and pass NaNs through.
TEST(SiluMulTest, VectorSwigluClampedMatchesTheElementFunction) {
  if (DetectedSimdLevel() < SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 5.0f);
  std::uniform_real_distribution<float> wide(-100.0f, 100.0f);
  std::vector<float> g, u;
  for (int i = 0; i < 20000; ++i) {
    g.push_back(i % 3 ? nd(rng) : wide(rng));
    u.push_back(i % 5 ? nd(rng) : wide(rng));
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float v :
       {7.0f, -7.0f, 7.0001f, -7.0001f, 6.9999f, 0.0f, -0.0f, 60.0f, -60.0f, inf, -inf, nan}) {
    for (float w : {7.0f, -7.0f, 7.5f, -7.5f, 0.5f, inf, -inf, nan}) {
      g.push_back(v);
      u.push_back(w);
    }
  }
  const int64_t n = static_cast<int64_t>(g.size());  // not a multiple of 16: the tail runs too
  std::vector<float> want(n);
  kernels::SwigluClampedPortable(g.data(), u.data(), want.data(), n);
  ExpectLevelsMatch(GetSwigluClamped, g, u, want);
  EXPECT_EQ(GetSwigluClamped(SimdLevel::kScalar), &kernels::SwigluClampedPortable);
}

}  // namespace
}  // namespace moe
