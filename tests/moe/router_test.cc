#include "lib/moe/router.h"

#include <cmath>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(RouterTest, PicksTopKBySoftmaxAndRenormalises) {
  RouterConfig c{4, 2, true, nullptr};
  std::vector<float> logits = {0.f, 2.f, 1.f, -1.f};
  Routing r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2}));
  float e1 = std::exp(2.f), e2 = std::exp(1.f);
  EXPECT_NEAR(r.weights[0], e1 / (e1 + e2), 1e-6);
  EXPECT_NEAR(r.weights[1], e2 / (e1 + e2), 1e-6);
}

TEST(RouterTest, RawWeightsAreFullSoftmaxProbabilities) {
  RouterConfig c{3, 1, false, {}};
  std::vector<float> logits = {0.f, 0.f, std::log(2.f)};
  Routing r = Route(c, logits, 1);
  EXPECT_EQ(r.experts[0], 2);
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-6);
  EXPECT_NEAR(r.entropy[0], -(0.25 * std::log(0.25) * 2 + 0.5 * std::log(0.5)), 1e-5);
}

TEST(RouterTest, TiesGoToTheLowerExpertId) {
  RouterConfig c{4, 2, true, nullptr};
  std::vector<float> logits = {1.f, 3.f, 3.f, 3.f};
  Routing r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2}));
}

TEST(RouterTest, MaskedExpertsAreSkippedAndFewerThanKLeavesEmptySlots) {
  const std::vector<bool> disabled = {true, false, true};
  RouterConfig c{3, 2, true, &disabled};
  std::vector<float> logits = {5.f, 0.f, 4.f, /* token 2 */ 0.f, 1.f, 2.f};
  Routing r = Route(c, logits, 2);
  EXPECT_EQ(r.experts[0], 1);
  EXPECT_EQ(r.experts[1], -1);
  EXPECT_FLOAT_EQ(r.weights[0], 1.f);
  EXPECT_FLOAT_EQ(r.weights[1], 0.f);
  EXPECT_EQ(r.experts[2], 1);
}

}  // namespace
}  // namespace moe
