// Activation quantization is bit-identical on every SIMD level, including the awkward values:
// ties at .5, all-zero blocks, huge and tiny magnitudes, NaN and infinities.
#include "lib/backend/cpu/q8_activations.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/cpu_features.h"

namespace moe {
namespace {

std::vector<Q8Block> Quantize(const std::vector<float>& x, SimdLevel level) {
  const SimdLevel before = ActiveSimdLevel();
  SetSimdLevelForTesting(level);
  std::vector<Q8Block> q(x.size() / 32);
  QuantizeActivations(x.data(), static_cast<int64_t>(x.size()), q.data());
  SetSimdLevelForTesting(before);
  return q;
}

TEST(Q8ActivationsTest, EveryLevelGivesTheSameBlocks) {
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
  const std::vector<Q8Block> want = Quantize(x, SimdLevel::kScalar);
  // The handled cases really are in the data: NaN leaves its block's other quants alone.
  EXPECT_EQ(want[1].d, 0.0f);
  EXPECT_NE(want[5].d, 0.0f);
  EXPECT_EQ(want[5].q[7], 0);
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Vnni}) {
    if (level > DetectedSimdLevel()) continue;
    const std::vector<Q8Block> got = Quantize(x, level);
    for (size_t b = 0; b < want.size(); ++b) {
      EXPECT_EQ(std::memcmp(&got[b], &want[b], sizeof(Q8Block)), 0)
          << CpuSimdLevelName(level) << " block " << b << ": d " << got[b].d << " vs " << want[b].d
          << ", sums " << got[b].sum[0] << "," << got[b].sum[1] << " vs " << want[b].sum[0] << ","
          << want[b].sum[1];
    }
  }
}

}  // namespace
}  // namespace moe
