// Activation quantization is bit-identical on every SIMD level, including the awkward values:
// ties at .5, all-zero blocks, huge and tiny magnitudes, NaN and infinities.
#include "lib/backend/cpu/q8_activations.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/cpu_features.h"

namespace moe {
namespace {

std::vector<Q8Block> Quantize(const std::vector<float>& x, SimdLevel level,
                              ActivationScales scales) {
  const SimdLevel before = ActiveSimdLevel();
  SetSimdLevelForTesting(level);
  std::vector<Q8Block> q(x.size() / 32);
  QuantizeActivations(x.data(), static_cast<int64_t>(x.size()), q.data(), scales);
  SetSimdLevelForTesting(before);
  return q;
}

class Q8ActivationsTest : public testing::TestWithParam<ActivationScales> {};

TEST_P(Q8ActivationsTest, EveryLevelGivesTheSameBlocks) {
  const ActivationScales scales = GetParam();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> x(32 * 64);
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                      // an all-zero block
  for (int i = 0; i < 32; ++i) x[64 + i] = (i - 16) * (127.0f / 16);  // exact .5 ties
  x[96] = 1e30f;
  x[128 + 3] = 1e-30f;
  x[160 + 7] = std::numeric_limits<float>::quiet_NaN();
  x[192 + 9] = std::numeric_limits<float>::infinity();
  x[224 + 31] = -std::numeric_limits<float>::infinity();
  // Scales that are subnormal in half precision, and a spread of magnitudes.
  for (int i = 0; i < 32; ++i) x[256 + i] *= 1e-3f;
  for (int i = 0; i < 32; ++i) x[288 + i] *= 1e-6f;
  for (int b = 10; b < 64; ++b)
    for (int i = 0; i < 32; ++i) x[32 * b + i] *= std::ldexp(1.0f, b % 24 - 12);
  // Per super-block, an all-zero one too, and one of tiny values beside a huge one.
  for (int i = 0; i < 256; ++i) x[1024 + i] = 0.0f;
  for (int i = 0; i < 256; ++i) x[1280 + i] *= 1e-20f;
  x[1280 + 100] = 3e4f;
  const std::vector<Q8Block> want = Quantize(x, SimdLevel::kScalar, scales);
  // The handled cases really are in the data: NaN leaves its block's other quants alone.
  if (scales == ActivationScales::kPerBlock) {
    EXPECT_EQ(want[1].d, 0.0f);
  }
  EXPECT_NE(want[5].d, 0.0f);
  EXPECT_EQ(want[5].q[7], 0);
  EXPECT_EQ(want[32].d, 0.0f);
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Vnni}) {
    if (level > DetectedSimdLevel()) continue;
    const std::vector<Q8Block> got = Quantize(x, level, scales);
    for (size_t b = 0; b < want.size(); ++b) {
      EXPECT_EQ(std::memcmp(&got[b], &want[b], sizeof(Q8Block)), 0)
          << CpuSimdLevelName(level) << " block " << b << ": d " << got[b].d << " vs " << want[b].d
          << ", sums " << got[b].sum[0] << "," << got[b].sum[1] << " vs " << want[b].sum[0] << ","
          << want[b].sum[1];
    }
  }
}

// The blocks of a super-block share one float scale (not rounded to half precision) that maps
// its largest magnitude to 127, and every value to within half a step.
TEST(Q8ActivationsSuperBlockTest, OneScalePerSuperBlock) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> x(256 * 6);
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 256; ++i) x[256 + i] *= 1e-3f;
  x[512 + 77] = -50.0f;  // an outlier sets its super-block's scale
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > DetectedSimdLevel()) continue;
    const std::vector<Q8Block> q = Quantize(x, level, ActivationScales::kPerSuperBlock);
    for (int sb = 0; sb < 6; ++sb) {
      float amax = 0;
      for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[256 * sb + i]));
      for (int b = 8 * sb; b < 8 * sb + 8; ++b) {
        ASSERT_EQ(q[b].d, amax / 127.0f) << CpuSimdLevelName(level) << " block " << b;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
          EXPECT_NEAR(q[b].d * q[b].q[i], x[32 * b + i], 0.5001f * q[b].d) << "block " << b;
          sum += q[b].q[i];
        }
        EXPECT_EQ(q[b].sum[0] + q[b].sum[1], sum);
        EXPECT_EQ(q[b].dsum, q[b].d * static_cast<float>(sum));
      }
    }
    EXPECT_EQ(q[2 * 8 + 2].q[77 - 64], -127);
  }
}

// Each block's sum comes back as 64 hi + lo from signed bytes, at the extremes too (a block of
// 32 quants of -127 or 127), in the order the K-quant kernels read them.
TEST(Q8ActivationsSuperBlockTest, SplitSumsRebuildEachBlocksSum) {
  const int sums[] = {-4064, 4064, -1, 0, 63, 64, -64, -65, 4000, -2048, 1, 127, -128, 2032, 7, -7};
  std::vector<Q8Block> blocks(16);
  for (int b = 0; b < 16; ++b) {
    blocks[b].sum[0] = static_cast<int16_t>(sums[b] / 2);
    blocks[b].sum[1] = static_cast<int16_t>(sums[b] - sums[b] / 2);
  }
  std::vector<SplitSums> split(2);
  SplitSuperBlockSums(blocks.data(), 2, split.data());
  for (int b = 0; b < 16; ++b) {
    const auto* bytes = reinterpret_cast<const int8_t*>(split[b / 8].words);
    const int j = b % 8, hi = bytes[j], lo = bytes[8 + j];
    EXPECT_EQ(64 * hi + lo, sums[b]) << "block " << b;
    EXPECT_GE(lo, 0);
    EXPECT_LT(lo, 64);
  }
}

INSTANTIATE_TEST_SUITE_P(Scales, Q8ActivationsTest,
                         testing::Values(ActivationScales::kPerBlock,
                                         ActivationScales::kPerSuperBlock),
                         [](const testing::TestParamInfo<ActivationScales>& i) {
                           return i.param == ActivationScales::kPerBlock ? "PerBlock"
                                                                         : "PerSuperBlock";
                         });

}  // namespace
}  // namespace moe
