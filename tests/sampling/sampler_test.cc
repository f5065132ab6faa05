#include "lib/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/sampling/logit_search.h"

namespace moe {
namespace {

const SimdLevel kLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512};

// Runs body at every SIMD level this CPU has, then restores the level in force.
template <typename Body>
void AtEveryLevel(Body body) {
  const SimdLevel before = ActiveSimdLevel();
  for (SimdLevel level : kLevels) {
    if (SetSimdLevelForTesting(level) != level) continue;
    SCOPED_TRACE(std::string(CpuSimdLevelName(level)));
    body();
  }
  SetSimdLevelForTesting(before);
}

// Logits drawn from few values, so that ties are common; NaN and -inf where asked.
std::vector<float> Logits(std::mt19937& rng, size_t n, bool specials) {
  std::uniform_int_distribution<int> value(-20, 20), special(0, 15);
  std::vector<float> x(n);
  for (float& v : x) {
    v = static_cast<float>(value(rng)) * 0.25f;
    if (specials && special(rng) == 0) v = NAN;
    if (specials && special(rng) == 1) v = -INFINITY;
  }
  return x;
}

const size_t kLengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 1000, 32000};

TEST(LogitSearchTest, FirstAboveIsTheFirstLargerValueAfterTheStart) {
  std::mt19937 rng(1);
  AtEveryLevel([&] {
    for (size_t n : kLengths) {
      for (int trial = 0; trial < 20; ++trial) {
        const std::vector<float> x = Logits(rng, n, /*specials=*/true);
        const int64_t from = std::uniform_int_distribution<int64_t>(0, n)(rng);
        const float t = static_cast<float>(std::uniform_int_distribution<int>(-24, 24)(rng)) * .25f;
        int64_t want = static_cast<int64_t>(n);
        for (int64_t i = from; i < static_cast<int64_t>(n); ++i) {
          if (x[i] > t) {
            want = i;
            break;
          }
        }
        ASSERT_EQ(FirstAbove(x.data(), from, static_cast<int64_t>(n), t), want)
            << "n " << n << " from " << from << " t " << t;
      }
    }
  });
}

TEST(SamplerTest, ArgMaxIsTheFirstLargestValueAndNeverNaN) {
  std::mt19937 rng(2);
  AtEveryLevel([&] {
    for (size_t n : kLengths) {
      for (int trial = 0; trial < 20; ++trial) {
        const std::vector<float> x = Logits(rng, n, /*specials=*/trial % 2 == 1);
        int64_t want = 0;
        float best = -INFINITY;
        for (size_t i = 0; i < n; ++i) {
          if (x[i] > best) {
            best = x[i];
            want = static_cast<int64_t>(i);
          }
        }
        ASSERT_EQ(ArgMax(x), want) << "n " << n;
      }
    }
    EXPECT_EQ(ArgMax(std::vector<float>{NAN, 1.f, 3.f, NAN, 3.f}), 2);
    EXPECT_EQ(ArgMax(std::vector<float>{NAN, NAN}), 0);
    EXPECT_EQ(ArgMax(std::vector<float>{-INFINITY, -INFINITY, -1.f}), 2);
  });
}

// What sorting every (logit, id) pair gives: larger first, ties to the lower id, NaN as -inf.
std::vector<std::pair<float, int32_t>> SortedPrefix(const std::vector<float>& x, size_t k) {
  std::vector<std::pair<float, int32_t>> all;
  for (size_t i = 0; i < x.size(); ++i) {
    all.push_back({std::isnan(x[i]) ? -INFINITY : x[i], static_cast<int32_t>(i)});
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  all.resize(std::min(k, all.size()));
  return all;
}

TEST(SamplerTest, TopCandidatesAreTheFirstKOfSortingThemAll) {
  std::mt19937 rng(3);
  std::vector<std::pair<float, int32_t>> got;
  AtEveryLevel([&] {
    for (size_t n : kLengths) {
      for (size_t k : {size_t{1}, size_t{2}, size_t{5}, size_t{40}, n - 1, n, n + 3}) {
        if (k == 0) continue;
        for (int trial = 0; trial < 5; ++trial) {
          const std::vector<float> x = Logits(rng, n, /*specials=*/trial % 2 == 1);
          TopCandidates(x, k, &got);
          ASSERT_EQ(got, SortedPrefix(x, k)) << "n " << n << " k " << k;
        }
      }
    }
  });
  // Ascending logits: every value replaces the worst so far.
  std::vector<float> rising(1000);
  for (size_t i = 0; i < rising.size(); ++i) rising[i] = static_cast<float>(i);
  TopCandidates(rising, 40, &got);
  EXPECT_EQ(got, SortedPrefix(rising, 40));
}

TEST(SamplerTest, GreedyTakesTheLargestLogitAndSeedsRepeat) {
  std::mt19937 rng(4);
  std::vector<float> x = Logits(rng, 5000, /*specials=*/false);
  SamplerConfig greedy;
  greedy.temperature = 0;
  std::vector<float> copy = x;
  EXPECT_EQ(Sampler(greedy).Sample(absl::MakeSpan(copy), {}), ArgMax(x));

  SamplerConfig seeded;
  seeded.seed = 42;
  Sampler a(seeded), b(seeded);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> xa = x, xb = x;
    ASSERT_EQ(a.Sample(absl::MakeSpan(xa), {}), b.Sample(absl::MakeSpan(xb), {}));
  }
}

TEST(SamplerTest, DrawsOnlyAmongTheTopKCandidates) {
  std::mt19937 rng(5);
  std::vector<float> x = Logits(rng, 3000, /*specials=*/true);
  SamplerConfig c;
  c.top_k = 3;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  c.temperature = 100.0f;  // nearly uniform over the three
  c.seed = 7;
  Sampler s(c);
  std::set<int32_t> allowed;
  for (const auto& [logit, id] : SortedPrefix(x, 3)) allowed.insert(id);
  std::set<int32_t> seen;
  for (int i = 0; i < 300; ++i) {
    std::vector<float> copy = x;
    const int32_t id = s.Sample(absl::MakeSpan(copy), {});
    ASSERT_TRUE(allowed.count(id)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen, allowed);
}

// The sampler as it was before candidates were filtered: every token sorted (by the test's own
// full sort), then the same softmax, min-p, top-p and draw, with the same generator.
int32_t SortEverythingSample(const SamplerConfig& c, std::mt19937_64& rng,
                             const std::vector<float>& logits) {
  std::vector<double> scratch;
  return DrawFromSorted(SortedPrefix(logits, logits.size()), 0, c, rng, &scratch);
}

// Without a top-k, the sampler sorts only the tokens min-p or top-p can keep: the same draws as
// sorting them all, for peaked and flat logits, at every SIMD level.
TEST(SamplerTest, WithoutTopKDrawsAsSortingEveryToken) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  AtEveryLevel([&] {
    for (size_t n : {size_t{7}, size_t{100}, size_t{5000}}) {
      for (float spread : {0.3f, 3.0f, 12.0f}) {
        std::vector<float> x(n);
        for (float& v : x) v = spread * nd(rng);
        if (n > 10) x[3] = NAN;
        for (auto [temperature, min_p, top_p] : {std::tuple{0.8f, 0.05f, 0.95f},
                                                 {1.5f, 0.01f, 0.9f},
                                                 {0.3f, 0.2f, 1.0f},
                                                 {2.0f, 1.0f, 0.5f},
                                                 {0.8f, 0.0f, 0.95f},
                                                 {1.2f, 0.0f, 0.5f},
                                                 {3.0f, 0.0f, 0.999f}}) {
          SamplerConfig c;
          c.top_k = 0;
          c.temperature = temperature;
          c.min_p = min_p;
          c.top_p = top_p;
          c.seed = 11;
          Sampler sampler(c);
          std::mt19937_64 reference_rng(c.seed);
          for (int draw = 0; draw < 40; ++draw) {
            std::vector<float> copy = x;
            ASSERT_EQ(sampler.Sample(absl::MakeSpan(copy), {}),
                      SortEverythingSample(c, reference_rng, x))
                << "n " << n << " spread " << spread << " T " << temperature << " min_p " << min_p
                << " top_p " << top_p << " draw " << draw;
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace moe
