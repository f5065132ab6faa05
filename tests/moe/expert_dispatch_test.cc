// Both ways to the token-to-expert lists (lib/moe/expert_dispatch.h) — the per-expert steps the
// CUDA kernel runs, one thread per expert, and the counting pass of the host (ExpertLists) —
// against the lists built the plain way, token by token: each expert's tokens in token order,
// each choice's place.
#include "lib/moe/expert_dispatch.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/moe/expert_lists.h"

namespace moe {
namespace {

TEST(ExpertDispatchTest, ListsAreTheTokenByTokenOnes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    SCOPED_TRACE(trial);
    const int32_t n_expert = 1 + static_cast<int32_t>(rng() % 64);
    const int64_t n = rng() % 40, k = 1 + rng() % 8;
    std::vector<int32_t> experts(n * k);
    for (int32_t& e : experts) {
      e = rng() % 7 == 0 ? -1 : static_cast<int32_t>(rng() % n_expert);
    }
    // The CPU mixture layer's way: append each token to its experts' lists in token order.
    std::vector<std::vector<int32_t>> by_expert(n_expert);
    std::vector<int32_t> want_place(n * k, -1);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = experts[t * k + j];
        if (e < 0) continue;
        want_place[t * k + j] = static_cast<int32_t>(by_expert[e].size());
        by_expert[e].push_back(static_cast<int32_t>(t));
      }
    }
    for (const bool counting : {false, true}) {
      SCOPED_TRACE(counting ? "ListExpertsByCounting" : "DispatchExperts");
      std::vector<int64_t> offsets(n_expert + 1, -7);
      std::vector<int32_t> tokens(n * k, -7), place(n * k, -7);
      (counting ? ListExpertsByCounting : DispatchExperts)(
          experts.data(), n, k, n_expert, offsets.data(), tokens.data(), place.data());
      EXPECT_EQ(place, want_place);
      ASSERT_EQ(offsets[0], 0);
      for (int32_t e = 0; e < n_expert; ++e) {
        const std::vector<int32_t> listed(tokens.begin() + offsets[e],
                                          tokens.begin() + offsets[e + 1]);
        EXPECT_EQ(listed, by_expert[e]) << "expert " << e;
      }
      EXPECT_EQ(offsets[n_expert],
                static_cast<int64_t>(std::count_if(experts.begin(), experts.end(),
                                                   [](int32_t e) { return e >= 0; })));
    }
    // The host's owner of the lists, reused across steps of different sizes as a layer reuses it.
    static ExpertLists lists;
    lists.Build(experts.data(), n, k, n_expert);
    for (int32_t e = 0; e < n_expert; ++e) {
      EXPECT_EQ(lists.CountOf(e), static_cast<int64_t>(by_expert[e].size()));
      const absl::Span<const int32_t> listed = lists.TokensOf(e);
      EXPECT_EQ(std::vector<int32_t>(listed.begin(), listed.end()), by_expert[e]) << "expert " << e;
    }
    for (int64_t s = 0; s < n * k; ++s) EXPECT_EQ(lists.PlaceOf(s), want_place[s]);
  }
}

TEST(ExpertDispatchTest, NoTokensGiveEmptyLists) {
  std::vector<int64_t> offsets(5, -1);
  DispatchExperts(nullptr, 0, 4, 4, offsets.data(), nullptr, nullptr);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 0, 0, 0, 0}));
  offsets.assign(5, -1);
  ListExpertsByCounting(nullptr, 0, 4, 4, offsets.data(), nullptr, nullptr);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 0, 0, 0, 0}));
}

// Every choice on the last expert, and on the first: the counts that the prefix sums shift.
TEST(ExpertDispatchTest, CountingHandlesTheEdgeExperts) {
  for (const int32_t chosen : {0, 5}) {
    const std::vector<int32_t> experts = {chosen, -1, chosen, chosen};  // n = 2, k = 2
    std::vector<int64_t> offsets(7, -1);
    std::vector<int32_t> tokens(4, -1), place(4, -7);
    ListExpertsByCounting(experts.data(), 2, 2, 6, offsets.data(), tokens.data(), place.data());
    for (int32_t e = 0; e <= 6; ++e) EXPECT_EQ(offsets[e], e > chosen ? 3 : 0) << e;
    EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + 3),
              (std::vector<int32_t>{0, 1, 1}));
    EXPECT_EQ(place, (std::vector<int32_t>{0, -1, 1, 2}));
  }
}

}  // namespace
}  // namespace moe
