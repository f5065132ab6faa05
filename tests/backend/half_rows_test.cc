// The KV cache's float-to-half conversion: each level's kernel gives FloatToHalf's bits.
#include "lib/backend/cpu/half_rows.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/base/half.h"

namespace moe {
namespace {

TEST(HalfRowsTest, EveryLevelRoundsAsFloatToHalf) {
  std::vector<float> x = {0.f,
                          -0.f,
                          1.f,
                          -2.5f,
                          65504.f,
                          65519.f,
                          65520.f,
                          1e9f,
                          -1e9f,
                          6.1e-5f,
                          6.0e-8f,
                          2.9e-8f,
                          3.0e-8f,
                          1e-10f,
                          1.0009765625f /* tie to even */,
                          1.0029296875f /* tie, odd */,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(3);
  for (int i = 0; i < 5000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);  // every exponent, NaNs included
  }
  for (int i = 0; i < 3; ++i) x.push_back(1.5f);  // a tail shorter than a vector
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
    if (level > DetectedSimdLevel()) continue;
    std::vector<uint16_t> got(x.size());
    GetToHalves(level)(x.data(), static_cast<int64_t>(x.size()), got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(HalfToFloat(got[i]))) << CpuSimdLevelName(level) << " at " << i;
      } else {
        ASSERT_EQ(got[i], FloatToHalf(x[i])) << CpuSimdLevelName(level) << " x = " << x[i];
      }
    }
  }
}

}  // namespace
}  // namespace moe
