#include "lib/moe/expert_pruning.h"

#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

std::vector<int32_t> PrunedOf(const PruningPlan& plan, int layer) {
  std::vector<int32_t> out;
  for (const ExpertKey& k : plan.pruned) {
    if (k.layer == layer) out.push_back(k.expert);
  }
  return out;
}

TEST(ExpertPruningTest, KeepsTheMostChosenUntilTheyCarryTheShare) {
  RoutingProfile p;
  p.counts = {{5, 50, 15, 30}, {30, 30, 10, 30}};
  auto plan = PlanPruning(p, 0.8, 1, {true, true});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PrunedOf(*plan, 0), (std::vector<int32_t>{0, 2}));  // 50 + 30 = 80 of 100
  EXPECT_DOUBLE_EQ(plan->kept_traffic[0], 0.8);
  EXPECT_EQ(PrunedOf(*plan, 1), (std::vector<int32_t>{2}));  // 90 of 100
  EXPECT_DOUBLE_EQ(plan->kept_traffic[1], 0.9);
  plan = PlanPruning(p, 0.9, 1, {true, true});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(PrunedOf(*plan, 0), (std::vector<int32_t>{0}));  // 95 of 100
  EXPECT_EQ(PrunedOf(*plan, 1), (std::vector<int32_t>{2}));
  plan = PlanPruning(p, 0.95, 1, {true, true});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(PrunedOf(*plan, 1), (std::vector<int32_t>{}));
}

TEST(ExpertPruningTest, TheMinimumDenseAndUnseenLayersAndKeepingAll) {
  RoutingProfile p;
  p.counts = {{100, 0, 0, 0}, {0, 0, 0, 0}, {7, 0, 3, 0}};
  auto plan = PlanPruning(p, 0.5, 2, {true, true, false});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(PrunedOf(*plan, 0), (std::vector<int32_t>{2, 3}));  // at least 2 kept
  EXPECT_EQ(PrunedOf(*plan, 1), (std::vector<int32_t>{}));      // no token seen: keep all
  EXPECT_EQ(PrunedOf(*plan, 2), (std::vector<int32_t>{}));      // not a routed layer
  // Keeping everything keeps every expert chosen at all.
  plan = PlanPruning(p, 1.0, 1, {true, true, true});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(PrunedOf(*plan, 0), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(PrunedOf(*plan, 2), (std::vector<int32_t>{1, 3}));
}

TEST(ExpertPruningTest, BadSharesAndMinimumsAreRefused) {
  RoutingProfile p;
  p.counts = {{1, 2}};
  EXPECT_EQ(PlanPruning(p, 0.0, 1, {true}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanPruning(p, 1.5, 1, {true}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanPruning(p, 0.5, 0, {true}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
