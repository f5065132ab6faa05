// The CUDA router against the CPU router (lib/moe/router.h) on random routings of every kind the
// models and policies make: softmax and sigmoid gating, selection bias, limited groups, disabled
// experts, temperature, dynamic top-k, Gaussian and Gumbel noise, tied logits (label gpu). The
// experts must be the same, in the same order; weights and entropy may differ by the device's
// expf/logf (within 2 ulp of the host's). Without a CUDA device it skips and says why: compiled
// here, never run (docs/cuda.md).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dequantize.h"
#include "kernels/route.h"
#include "lib/moe/router.h"

namespace moe {
namespace {

TEST(CudaRouteTest, ChoosesTheCpuRoutersExpertsForEveryKindOfRouting) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    RouterConfig c;
    const int group_counts[] = {1, 2, 4, 8};
    c.n_groups = group_counts[rng() % 4];
    c.n_expert = c.n_groups * static_cast<int>(1 + rng() % 32);
    c.top_k = 1 + static_cast<int>(rng() % std::min(8, c.n_expert));
    c.n_groups_used = 1 + static_cast<int>(rng() % c.n_groups);
    c.renormalize = rng() % 2;
    c.gating = rng() % 2 ? Gating::kSoftmax : Gating::kSigmoid;
    c.scale = rng() % 2 ? 1.f : 2.5f;
    std::vector<float> bias(c.n_expert);
    for (float& b : bias) b = 0.3f * nd(rng);
    if (rng() % 2) c.selection_bias = bias.data();
    std::vector<bool> disabled(c.n_expert);
    for (size_t e = 0; e < disabled.size(); ++e) disabled[e] = rng() % 5 == 0;
    if (rng() % 3 == 0) c.disabled = &disabled;
    if (rng() % 3 == 0) {
      c.policy.confidence = static_cast<float>(rng() % 100) / 100.f;
      c.policy.min_top_k = 1 + static_cast<int>(rng() % 3);
    }
    if (rng() % 3 == 0) c.policy.temperature = 0.3f + static_cast<float>(rng() % 30) / 10.f;
    const int64_t n = 1 + rng() % 40;
    std::vector<int32_t> positions(n);
    for (int32_t& p : positions) p = static_cast<int32_t>(rng() % 4096);
    c.positions = positions.data();
    c.layer = static_cast<int>(rng() % 48);
    if (rng() % 3 == 0) {
      c.policy.noise = rng() % 2 ? RouterNoise::kGaussian : RouterNoise::kGumbel;
      c.policy.noise_scale = 0.5f;
      c.policy.noise_seed = rng();
    }
    std::vector<float> logits(n * c.n_expert);
    for (float& l : logits) l = rng() % 4 == 0 ? static_cast<float>(rng() % 3) : 3 * nd(rng);
    const Routing want = Route(c, logits, n);

    std::vector<uint8_t> mask;
    const TokenRouting tr = TokenRoutingOf(c, &mask);
    std::vector<int32_t> experts(n * c.top_k, -2);
    std::vector<float> weights(n * c.top_k, NAN), entropy(n, NAN);
    const std::string err = cuda::RouteTokensFromHost(
        tr, logits.data(), positions.data(), n, experts.data(), weights.data(), entropy.data());
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_EQ(experts, want.experts);
    for (size_t i = 0; i < weights.size(); ++i) {
      EXPECT_NEAR(weights[i], want.weights[i], 1e-5f * std::max(1.f, std::fabs(want.weights[i])))
          << "slot " << i;
    }
    for (int64_t t = 0; t < n; ++t) {
      EXPECT_NEAR(entropy[t], want.entropy[t], 1e-5f * std::max(1.f, want.entropy[t]));
    }
  }
}

TEST(CudaRouteTest, BadRoutingIsAnErrorNotALaunch) {
  TokenRouting c;
  c.n_expert = 8;
  c.top_k = 9;
  std::vector<float> logits(8);
  int32_t e[9];
  float w[9], h;
  EXPECT_FALSE(cuda::RouteTokensFromHost(c, logits.data(), nullptr, 1, e, w, &h).empty());
  c.top_k = 2;
  c.n_groups = 3;  // 8 experts do not split into 3 groups
  c.n_groups_used = 1;
  EXPECT_FALSE(cuda::RouteTokensFromHost(c, logits.data(), nullptr, 1, e, w, &h).empty());
}

}  // namespace
}  // namespace moe
