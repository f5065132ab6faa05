// Every SIMD path of every weight type against the portable kernels, and the integer path
// against the float product it approximates.
#include "lib/backend/cpu/dot_kernels.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/quant_rows.h"

namespace moe {
namespace {

const DType kQuantTypes[] = {DType::kQ8_0,  DType::kQ4_0, DType::kQ4_1,  DType::kQ5_0,
                             DType::kQ5_1,  DType::kQ2_K, DType::kQ3_K,  DType::kQ4_K,
                             DType::kQ5_K,  DType::kQ6_K, DType::kMXFP4, DType::kIQ4_NL,
                             DType::kIQ4_XS};

std::vector<SimdLevel> AvailableLevels() {
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  for (SimdLevel l : {SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Vnni}) {
    if (DetectedSimdLevel() >= l) levels.push_back(l);
  }
  return levels;
}

TEST(DotKernelsTest, EveryLevelAgreesWithTheScalarKernel) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (int64_t n : {256, 1024, 2816}) {  // 2816 = 11 super-blocks
    std::vector<float> w(n), x(n);
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = 3 * nd(rng);
    std::vector<Q8Block> xq_block(n / 32);
    QuantizeActivations(x.data(), n, xq_block.data());
    // K-quant weights usually meet one activation scale per super-block, which some kernels
    // take a faster path for: both kinds of blocks for them.
    std::vector<Q8Block> xq_super(n / 32);
    QuantizeActivations(x.data(), n, xq_super.data(), ActivationScales::kPerSuperBlock);
    for (const bool super : {false, true}) {
      for (DType t : kQuantTypes) {
        if (super && GetDTypeInfo(t).block_elems != kSuperBlockValues) continue;
        const std::vector<Q8Block>& xq = super ? xq_super : xq_block;
        std::vector<uint8_t> row(RowBytes(t, n));
        ASSERT_TRUE(QuantizeRow(t, w.data(), row.data(), n).ok());
        const float want = GetQuantDot(t, SimdLevel::kScalar)(row.data(), xq.data(), n);
        std::vector<float> xd(xq.size()), xsum(xq.size()), xsum16(2 * xq.size());
        FillQ8Aux(xq.data(), static_cast<int64_t>(xq.size()), xd.data(), xsum.data(),
                  xsum16.data());
        const Q8Aux aux{xd.data(), xsum.data(), xsum16.data()};
        for (SimdLevel level : AvailableLevels()) {
          float got = GetQuantDot(t, level)(row.data(), xq.data(), n);
          EXPECT_NEAR(got, want, 1e-4 * (1 + std::fabs(want)))
              << DTypeName(t) << " " << CpuSimdLevelName(level) << " n=" << n << " super " << super;
          if (SplitQuantDotFn split = GetSplitQuantDot(t, level)) {
            EXPECT_NEAR(split(row.data(), xq.data(), aux, n), want, 1e-4 * (1 + std::fabs(want)))
                << DTypeName(t) << " split " << CpuSimdLevelName(level) << " n=" << n;
          }
        }
        // The integer product approximates the float one within the activation rounding:
        // each x moves by at most d/2 = max|x| / 254 per block.
        float exact = DotRow(t, row.data(), x.data(), n);
        double bound = 0;
        std::vector<float> wd(n);
        DequantizeRow(t, row.data(), wd.data(), n);
        for (int64_t b = 0; b < n / 32; ++b) {
          for (int i = 0; i < 32; ++i) bound += std::fabs(wd[32 * b + i]) * xq[b].d / 2;
        }
        EXPECT_NEAR(want, exact, bound + 1e-3) << DTypeName(t);
      }
    }
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      std::vector<uint8_t> row(RowBytes(t, n));
      ASSERT_TRUE(QuantizeRow(t, w.data(), row.data(), n).ok());
      const float want = GetFloatDot(t, SimdLevel::kScalar)(row.data(), x.data(), n);
      for (SimdLevel level : AvailableLevels()) {
        EXPECT_NEAR(GetFloatDot(t, level)(row.data(), x.data(), n), want,
                    1e-4 * (1 + std::fabs(want)))
            << DTypeName(t) << " " << CpuSimdLevelName(level);
      }
    }
  }
}

TEST(DotKernelsTest, ExtremeBlocksDoNotSaturate) {
  // All weights at the most negative Q8_0 value and activations at +-127: maddubs' int16 pair
  // sums are at their limit here.
  const int64_t n = 256;
  std::vector<float> w(n, -1.0f), x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = i % 2 ? 1.0f : -1.0f;
  x[0] = 1.0f;
  std::vector<Q8Block> xq(n / 32);
  QuantizeActivations(x.data(), n, xq.data());
  for (DType t : kQuantTypes) {
    std::vector<uint8_t> row(RowBytes(t, n));
    ASSERT_TRUE(QuantizeRow(t, w.data(), row.data(), n).ok());
    const float want = GetQuantDot(t, SimdLevel::kScalar)(row.data(), xq.data(), n);
    for (SimdLevel level : AvailableLevels()) {
      EXPECT_NEAR(GetQuantDot(t, level)(row.data(), xq.data(), n), want, 1e-3)
          << DTypeName(t) << " " << CpuSimdLevelName(level);
    }
  }
}

TEST(CpuFeaturesTest, LevelCanBeCappedForTesting) {
  SimdLevel before = ActiveSimdLevel();
  EXPECT_EQ(SetSimdLevelForTesting(SimdLevel::kScalar), SimdLevel::kScalar);
  EXPECT_EQ(ActiveSimdLevel(), SimdLevel::kScalar);
  SetSimdLevelForTesting(before);
  EXPECT_EQ(ActiveSimdLevel(), before);
}

}  // namespace
}  // namespace moe
