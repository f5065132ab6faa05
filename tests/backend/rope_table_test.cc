#include "lib/backend/cpu/rope_table.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

RopeParams YarnRope() {
  RopeParams rope;
  rope.n_rot = 64;
  rope.freq_base = 150000.f;
  rope.yarn_factor = 32.f;
  rope.yarn_orig_ctx = 4096;
  rope.magnitude = 1.25f;
  return rope;
}

// Each token's row holds the cosines, then the sines, of its pairs' angles times the magnitude,
// as the definition in rope_core.h makes them.
TEST(RopeTableTest, RowsAreTheirPositionsAngles) {
  const RopeParams rope = YarnRope();
  const std::vector<int32_t> positions = {0, 1, 4095, 70000, 3};
  RopeTable table;
  ASSERT_TRUE(table.Reset(positions.data(), 5, rope));
  table.FillTokens(0, 2);
  table.FillTokens(2, 5);
  const RopeCorrection corr = RopeCorrectionOf(rope);
  for (int64_t t = 0; t < 5; ++t) {
    for (int64_t i = 0; i < 32; ++i) {
      const float theta =
          RopeAngle(rope, positions[t], RopePairFrequency(rope, i), RopePairRamp(rope, corr, i));
      EXPECT_EQ(table.Row(t)[i], std::cos(theta) * 1.25f) << t << " " << i;
      EXPECT_EQ(table.Row(t)[32 + i], std::sin(theta) * 1.25f) << t << " " << i;
    }
  }
}

// A table is kept only for the same positions and the same angles' parameters; anything else
// that changes an angle asks for a fill.
TEST(RopeTableTest, ResetKeepsTheRowsOnlyForTheSameAngles) {
  const RopeParams rope = YarnRope();
  std::vector<int32_t> positions = {5, 6, 7};
  RopeTable table;
  EXPECT_TRUE(table.Reset(positions.data(), 3, rope));
  EXPECT_FALSE(table.Reset(positions.data(), 3, rope));
  RopeParams other_layout = rope;  // the same angles, paired otherwise
  other_layout.layout = RopeLayout::kNeox;
  EXPECT_FALSE(table.Reset(positions.data(), 3, other_layout));
  EXPECT_TRUE(table.Reset(positions.data(), 2, rope));
  EXPECT_TRUE(table.Reset(positions.data(), 3, rope));
  positions[1] = 9;
  EXPECT_TRUE(table.Reset(positions.data(), 3, rope));
  EXPECT_FALSE(table.Reset(positions.data(), 3, rope));
  std::vector<RopeParams> changed(7, rope);
  changed[0].n_rot = 32;
  changed[1].freq_base = 10000.f;
  changed[2].yarn_factor = 1.f;
  changed[3].yarn_orig_ctx = 8192;
  changed[4].yarn_beta_fast = 16.f;
  changed[5].yarn_beta_slow = 2.f;
  changed[6].magnitude = 1.f;
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_TRUE(table.Reset(positions.data(), 3, changed[i])) << i;
    EXPECT_TRUE(table.Reset(positions.data(), 3, rope)) << i;
  }
}

// Frequency factors are compared by value: new values at the same address (an array freed and
// another allocated there) are new angles.
TEST(RopeTableTest, FrequencyFactorsAreComparedByValue) {
  RopeParams rope = YarnRope();
  std::vector<float> factors(32, 1.f);
  rope.freq_factors = factors.data();
  const int32_t positions[] = {100, 200};
  RopeTable table;
  EXPECT_TRUE(table.Reset(positions, 2, rope));
  EXPECT_FALSE(table.Reset(positions, 2, rope));
  factors[7] = 4.f;
  ASSERT_TRUE(table.Reset(positions, 2, rope));
  table.FillTokens(0, 2);
  const RopeCorrection corr = RopeCorrectionOf(rope);
  const float theta = RopeAngle(rope, 200, RopePairFrequency(rope, 7), RopePairRamp(rope, corr, 7));
  EXPECT_EQ(table.Row(1)[7], std::cos(theta) * rope.magnitude);
  RopeParams none = rope;
  none.freq_factors = nullptr;
  EXPECT_TRUE(table.Reset(positions, 2, none));
}

}  // namespace
}  // namespace moe
