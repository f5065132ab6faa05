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

}  // namespace
}  // namespace moe
