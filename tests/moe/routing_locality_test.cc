// Routing locality: reuse distances per layer, and LRU hit rates from stack distances that agree
// with a cache simulated the slow way, at every size.
#include "lib/moe/routing_locality.h"

#include <algorithm>
#include <list>
#include <random>

#include "gtest/gtest.h"

namespace moe {
namespace {

// An LRU cache of `capacity` (layer, expert) units replayed token by token, layer by layer.
double SimulatedLruHitRate(const RoutingTrace& trace, int64_t capacity) {
  std::list<int64_t> recent;  // most recent first
  int64_t hits = 0, choices = 0;
  for (int64_t t = 0; t < trace.tokens(); ++t) {
    for (size_t l = 0; l < trace.layers.size(); ++l) {
      for (int64_t j = 0; j < trace.top_k; ++j) {
        const int32_t e = trace.layers[l][t * trace.top_k + j];
        if (e < 0) continue;
        const int64_t unit = static_cast<int64_t>(l) * trace.n_expert + e;
        ++choices;
        auto it = std::find(recent.begin(), recent.end(), unit);
        if (it != recent.end()) {
          ++hits;
          recent.erase(it);
        } else if (static_cast<int64_t>(recent.size()) == capacity) {
          recent.pop_back();
        }
        recent.push_front(unit);
      }
    }
  }
  return choices ? static_cast<double>(hits) / choices : 0;
}

// Skewed, locally repetitive routing: each token keeps some of the previous token's choices.
RoutingTrace SkewedTrace(int layers, int experts, int k, int tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::geometric_distribution<int> hot(0.15);
  RoutingTrace trace{experts, k, std::vector<std::vector<int32_t>>(layers)};
  for (int l = 0; l < layers; ++l) {
    std::vector<int32_t> prev;
    for (int t = 0; t < tokens; ++t) {
      std::vector<int32_t> chosen;
      while (static_cast<int>(chosen.size()) < k) {
        int32_t e = (!prev.empty() && rng() % 3 == 0) ? prev[rng() % prev.size()]
                                                      : (hot(rng) + l * 5) % experts;
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      trace.layers[l].insert(trace.layers[l].end(), chosen.begin(), chosen.end());
      prev = chosen;
    }
  }
  return trace;
}

TEST(RoutingLocalityTest, LruHitRateAgreesWithASimulatedCacheAtEverySize) {
  const RoutingTrace trace = SkewedTrace(3, 16, 4, 400, 7);
  auto r = AnalyzeRoutingLocality(trace);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, 400);
  EXPECT_EQ(r->experts, 48);
  EXPECT_EQ(r->choices, 3 * 400 * 4);
  for (int64_t capacity = 1; capacity <= 48; ++capacity) {
    EXPECT_DOUBLE_EQ(r->LruHitRate(capacity), SimulatedLruHitRate(trace, capacity))
        << "capacity " << capacity;
  }
  // Holding everything misses only the first use of each expert.
  EXPECT_DOUBLE_EQ(r->LruHitRate(48), 1.0 - static_cast<double>(r->cold) / r->choices);
}

TEST(RoutingLocalityTest, ReuseDistancesPerLayerInTokens) {
  // One layer, top-1: expert 0 at tokens 0, 1, 3 and 10; expert 1 at token 2; -1 at token 4.
  RoutingTrace trace{4, 1, {{0, 0, 1, 0, -1, 2, 2, 2, 2, 2, 0}}};
  auto r = AnalyzeRoutingLocality(trace);
  ASSERT_TRUE(r.ok()) << r.status();
  const LayerLocality& l = r->layers[0];
  EXPECT_EQ(l.choices, 10);
  EXPECT_EQ(l.first_uses, 3);  // experts 0, 1, 2
  // Reuses: 0 after 1 token, 0 after 2, 2 after 1 (four times), 0 after 7.
  EXPECT_EQ(l.reuse_buckets[0], 5);  // distance 1
  EXPECT_EQ(l.reuse_buckets[1], 1);  // 2-4
  EXPECT_EQ(l.reuse_buckets[2], 1);  // 5-16
  EXPECT_EQ(l.reuse_buckets[3], 0);
  EXPECT_EQ(l.reuse_buckets[4], 0);
  EXPECT_EQ(l.median_reuse, 1);
  EXPECT_NEAR(l.mean_reuse, (1 + 2 + 1 + 1 + 1 + 1 + 7) / 7.0, 1e-12);
}

TEST(RoutingLocalityTest, StaticPlacementHoldsTheMostChosenExperts) {
  // Layer 0 chooses expert 2 four times, 0 twice, 1 and 3 once; layer 1 chooses 1 and 3 four
  // times each.
  RoutingTrace trace{4, 2, {{2, 0, 2, 0, 2, 1, 2, 3}, {1, 3, 1, 3, 1, 3, 1, 3}}};
  auto r = AnalyzeRoutingLocality(trace);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->StaticHitRate(1), 4.0 / 16);
  EXPECT_DOUBLE_EQ(r->StaticHitRate(4), 14.0 / 16);
  EXPECT_DOUBLE_EQ(r->StaticHitRate(8), 1.0);
}

TEST(RoutingLocalityTest, MalformedTracesAreErrors) {
  EXPECT_FALSE(AnalyzeRoutingLocality(RoutingTrace{}).ok());
  EXPECT_FALSE(AnalyzeRoutingLocality(RoutingTrace{4, 2, {{0, 1, 2}}}).ok());    // not k-aligned
  EXPECT_FALSE(AnalyzeRoutingLocality(RoutingTrace{4, 1, {{0, 1}, {0}}}).ok());  // ragged
  EXPECT_FALSE(AnalyzeRoutingLocality(RoutingTrace{4, 1, {{0, 4}}}).ok());       // out of range
}

}  // namespace
}  // namespace moe
