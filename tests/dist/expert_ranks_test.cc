#include "lib/dist/expert_ranks.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(ExpertRanksTest, RoundRobinHoldsEachExpertOnceAndEvenly) {
  const std::vector<bool> routed = {false, true, true, true};
  for (int world : {1, 2, 3, 4, 8}) {
    auto ranks = ExpertRanks::RoundRobin(4, 8, world, routed);
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    size_t total = 0;
    for (int r = 0; r < world; ++r) total += ranks->OwnedBy(r).size();
    EXPECT_EQ(total, 3u * 8) << "every routed expert once";
    for (int l = 1; l < 4; ++l) {
      std::vector<int> held(world, 0);
      for (int e = 0; e < 8; ++e) ++held[ranks->owner(l, e)];
      EXPECT_LE(
          *std::max_element(held.begin(), held.end()) - *std::min_element(held.begin(), held.end()),
          1);
    }
    EXPECT_EQ(ranks->owner(0, 3), -1) << "a dense layer assigns nothing";
  }
  EXPECT_FALSE(ExpertRanks::RoundRobin(4, 8, 0, routed).ok());
  EXPECT_FALSE(ExpertRanks::RoundRobin(4, 8, 2, {true}).ok());
}

// A skewed profile: balancing by load spreads the hot experts, while each rank still holds
// its share of each layer's experts.
TEST(ExpertRanksTest, BalancedByProfileEvensTheMeasuredLoad) {
  RoutingProfile p;
  std::mt19937 rng(5);
  for (int l = 0; l < 6; ++l) {
    std::vector<int64_t> counts(16);
    for (int e = 0; e < 16; ++e) counts[e] = (e < 4 ? 1000 : 10) + rng() % 50;  // 4 hot ones
    p.counts.push_back(counts);
  }
  const std::vector<bool> routed(6, true);
  auto rr = ExpertRanks::RoundRobin(6, 16, 4, routed);
  auto balanced = ExpertRanks::Balanced(p, 4, routed);
  ASSERT_TRUE(rr.ok() && balanced.ok());
  const auto rr_load = rr->LoadOf(p.counts), load = balanced->LoadOf(p.counts);
  const int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
  EXPECT_EQ(total, std::accumulate(rr_load.begin(), rr_load.end(), int64_t{0}));
  EXPECT_LE(*std::max_element(load.begin(), load.end()),
            *std::max_element(rr_load.begin(), rr_load.end()));
  // Within one hot expert of the mean per layer, over 6 layers.
  EXPECT_LE(*std::max_element(load.begin(), load.end()), total / 4 + 6 * 1050);
  for (int l = 0; l < 6; ++l) {
    std::vector<int> held(4, 0);
    for (int e = 0; e < 16; ++e) ++held[balanced->owner(l, e)];
    for (int h : held) EXPECT_EQ(h, 4);
    // The four hot experts of a layer land on four different ranks.
    std::vector<int> hot = {balanced->owner(l, 0), balanced->owner(l, 1), balanced->owner(l, 2),
                            balanced->owner(l, 3)};
    std::sort(hot.begin(), hot.end());
    EXPECT_EQ(std::unique(hot.begin(), hot.end()), hot.end()) << "layer " << l;
  }
}

// One very hot expert per layer: no placement of whole experts can balance it, a replica can.
TEST(ExpertRanksTest, AReplicaSplitsAHotExpertsLoad) {
  RoutingProfile p;
  for (int l = 0; l < 3; ++l) {
    std::vector<int64_t> counts(8, 100);
    counts[(l * 3) % 8] = 2000;
    p.counts.push_back(counts);
  }
  const std::vector<bool> routed = {true, false, true};
  p.counts[1].assign(8, 0);
  auto ranks = ExpertRanks::Balanced(p, 2, routed);
  ASSERT_TRUE(ranks.ok());
  const auto before = ranks->LoadOf(p.counts);
  ASSERT_TRUE(ranks->AddReplicas(p, 1).ok());
  const auto after = ranks->LoadOf(p.counts);
  EXPECT_EQ(after[0] + after[1], before[0] + before[1]) << "the load is moved, not made";
  EXPECT_LT(std::abs(after[0] - after[1]), std::abs(before[0] - before[1]));
  for (int l : {0, 2}) {
    const int hot = (l * 3) % 8;
    EXPECT_EQ(ranks->holders(l, hot).size(), 2u) << "layer " << l;
    EXPECT_TRUE(ranks->holds(0, l, hot) && ranks->holds(1, l, hot));
    for (int e = 0; e < 8; ++e) {
      if (e != hot) {
        EXPECT_EQ(ranks->holders(l, e).size(), 1u);
      }
    }
    // Both ranks list the hot expert among theirs.
    for (int r : {0, 1}) {
      const auto own = ranks->OwnedBy(r);
      EXPECT_NE(std::find(own.begin(), own.end(), ExpertKey{l, hot}), own.end());
    }
  }
  EXPECT_TRUE(ranks->holders(1, 0).empty()) << "a dense layer has no holders";
  EXPECT_EQ(ranks->AddReplicas(p, -1).code(), absl::StatusCode::kInvalidArgument);
  RoutingProfile other;
  other.counts.assign(2, std::vector<int64_t>(8, 1));
  EXPECT_EQ(ranks->AddReplicas(other, 1).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
