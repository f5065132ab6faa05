// The per-expert dispatch steps (lib/moe/expert_dispatch.h) that the CUDA kernel runs, one
// thread per expert, against the lists the CPU's mixture layer builds token by token
// (MixtureFeedForward::Dispatch: each expert's tokens in token order, each choice's place).
#include "lib/moe/expert_dispatch.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

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
    std::vector<int64_t> offsets(n_expert + 1, -7);
    std::vector<int32_t> tokens(n * k, -7), place(n * k, -7);
    DispatchExperts(experts.data(), n, k, n_expert, offsets.data(), tokens.data(), place.data());
    EXPECT_EQ(place, want_place);
    ASSERT_EQ(offsets[0], 0);
    for (int32_t e = 0; e < n_expert; ++e) {
      const std::vector<int32_t> listed(tokens.begin() + offsets[e],
                                        tokens.begin() + offsets[e + 1]);
      EXPECT_EQ(listed, by_expert[e]) << "expert " << e;
    }
  }
}

TEST(ExpertDispatchTest, NoTokensGiveEmptyLists) {
  std::vector<int64_t> offsets(5, -1);
  DispatchExperts(nullptr, 0, 4, 4, offsets.data(), nullptr, nullptr);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace moe
