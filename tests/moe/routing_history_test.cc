#include "lib/moe/routing_history.h"

#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

RoutingPolicy Window(int window, float limit) {
  RoutingPolicy p;
  p.load_window = window;
  p.load_limit = limit;
  return p;
}

// 4 experts, top-2: over the window expert 0 took 2 of the 4 choices (share 0.5 against a limit
// of 1.5 x 1/4 = 0.375), so its weight scales by 0.75; expert 2 took 1 (0.25, within the limit).
// The pair's weights keep their sum.
TEST(RoutingHistoryTest, AnOverloadedExpertGivesWeightToTheOther) {
  RoutingHistory h;
  const int32_t past[][2] = {{0, 1}, {0, 2}};
  h.Record(0, 0, past[0], 2);
  h.Record(0, 1, past[1], 2);
  int32_t experts[] = {0, 2};
  float weights[] = {0.6f, 0.4f};
  EXPECT_EQ(h.Reweight(Window(8, 1.5f), 4, 0, 2, experts, weights, 2), 1);
  EXPECT_NEAR(weights[0] + weights[1], 1.f, 1e-6);
  EXPECT_NEAR(weights[0] / weights[1], 0.6f * 0.75f / 0.4f, 1e-5);
}

TEST(RoutingHistoryTest, OnlyTheWindowBeforeThePositionCounts) {
  RoutingHistory h;
  const int32_t busy[] = {0, 1}, quiet[] = {2, 3};
  for (int p = 0; p < 10; ++p) h.Record(0, p, busy, 2);
  for (int p = 10; p < 14; ++p) h.Record(0, p, quiet, 2);
  int32_t experts[] = {0, 2};
  float weights[] = {0.5f, 0.5f};
  // The 4 positions before 14 chose 2 and 3 only: expert 2 (share 0.5) is the overloaded one.
  EXPECT_EQ(h.Reweight(Window(4, 1.f), 4, 0, 14, experts, weights, 2), 1);
  EXPECT_GT(weights[0], weights[1]);
  // At position 10 the window holds only 0 and 1: expert 0 gives way.
  float again[] = {0.5f, 0.5f};
  EXPECT_EQ(h.Reweight(Window(4, 1.f), 4, 0, 10, experts, again, 2), 1);
  EXPECT_LT(again[0], again[1]);
  // Another layer, an empty past, or the policy off: nothing changes.
  float same[] = {0.5f, 0.5f};
  EXPECT_EQ(h.Reweight(Window(4, 1.f), 4, 1, 14, experts, same, 2), 0);
  EXPECT_EQ(h.Reweight(Window(4, 1.f), 4, 0, 0, experts, same, 2), 0);
  EXPECT_EQ(h.Reweight(Window(0, 1.f), 4, 0, 14, experts, same, 2), 0);
  EXPECT_EQ(same[0], 0.5f);
  EXPECT_EQ(same[1], 0.5f);
}

// Positions recorded again (a truncated sequence regrown) replace what was there.
TEST(RoutingHistoryTest, RecordingAgainReplaces) {
  RoutingHistory h;
  const int32_t a[] = {0, 1}, b[] = {2, 3};
  h.Record(0, 0, a, 2);
  h.Record(0, 0, b, 2);
  int32_t experts[] = {0, 1};
  float weights[] = {0.5f, 0.5f};
  EXPECT_EQ(h.Reweight(Window(4, 1.f), 4, 0, 1, experts, weights, 2), 0);
  int32_t now[] = {2, 0};
  EXPECT_EQ(h.Reweight(Window(4, 1.f), 4, 0, 1, now, weights, 2), 1);
}

}  // namespace
}  // namespace moe
