#include "lib/moe/router.h"

#include <cmath>
#include <limits>
#include <random>

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

// The entropy of a softmax over many experts is -sum p log p of its probabilities, whatever
// the logits' spread; an expert masked out (-inf) takes no share, and one that takes nearly
// all leaves an entropy of about 0, never below.
TEST(RouterTest, SoftmaxEntropyIsThatOfTheProbabilities) {
  std::mt19937 rng(3);
  for (const float spread : {0.1f, 1.f, 4.f, 30.f}) {
    SCOPED_TRACE(spread);
    std::normal_distribution<float> nd(0.f, spread);
    RouterConfig c{256, 8, true, nullptr};
    std::vector<float> logits(256);
    for (float& l : logits) l = nd(rng);
    logits[17] = -std::numeric_limits<float>::infinity();
    Routing r = Route(c, logits, 1);
    double max_l = -1e30, sum = 0;
    for (float l : logits) max_l = std::max<double>(max_l, l);
    for (float l : logits) sum += std::exp(l - max_l);
    double want = 0;
    for (float l : logits) {
      const double p = std::exp(l - max_l) / sum;
      if (p > 0) want -= p * std::log(p);
    }
    EXPECT_NEAR(r.entropy[0], want, 1e-5 * std::max(1.0, want));
  }
  RouterConfig c{4, 1, false, nullptr};
  const std::vector<float> one_takes_all = {200.f, 0.f, 0.f, 0.f};
  Routing r = Route(c, one_takes_all, 1);
  EXPECT_GE(r.entropy[0], 0.f);
  EXPECT_LT(r.entropy[0], 1e-6f);
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

float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// DeepSeek-V3 / GLM-4.5 routing: the bias chooses, the unbiased sigmoid scores weight.
TEST(RouterTest, SelectionBiasChoosesButDoesNotWeight) {
  RouterConfig c{4, 2, true, nullptr};
  c.gating = Gating::kSigmoid;
  const float bias[] = {0.f, 0.f, 0.f, 1.f};
  c.selection_bias = bias;
  c.scale = 2.5f;
  std::vector<float> logits = {2.f, 1.f, 0.f, -1.f};
  Routing r = Route(c, logits, 1);
  // Scores + bias: 0.88, 0.73, 0.5, 1.27: expert 3 first although its score is the lowest.
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 0}));
  const float s3 = Sigmoid(-1.f), s0 = Sigmoid(2.f);
  EXPECT_NEAR(r.weights[0], 2.5f * s3 / (s3 + s0), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5f * s0 / (s3 + s0), 1e-6);
}

// Groups are scored by the sum of their two best; only the best groups' experts are chosen.
TEST(RouterTest, GroupLimitKeepsTheBestGroupsOnly) {
  RouterConfig c{8, 2, false, nullptr};
  c.gating = Gating::kSigmoid;
  c.n_groups = 4;
  c.n_groups_used = 1;
  // Group 0 has the single best expert (0) but group 2's two best sum higher.
  std::vector<float> logits = {5.f, -5.f, -1.f, -1.f, 3.f, 3.f, -2.f, -2.f};
  Routing r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{4, 5}));
  EXPECT_NEAR(r.weights[0], Sigmoid(3.f), 1e-6);  // raw scores: no renormalisation, scale 1
  c.n_groups_used = 2;
  r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 4}));
}

// Dynamic top-k: a token keeps its best experts until they hold the confidence share of its top-k
// scores (at least min_top_k), and the kept weights renormalise over themselves.
TEST(RouterTest, ConfidenceKeepsTheBestUntilTheirShareIsReached) {
  RouterConfig c{6, 4, true, nullptr};
  // Top-4 probabilities in the ratio 8 : 4 : 2 : 1 (and two negligible experts).
  std::vector<float> logits = {std::log(8.f), std::log(4.f), std::log(2.f), 0.f, -30.f, -30.f};
  const Routing all = Route(c, logits, 1);
  EXPECT_EQ(all.experts, (std::vector<int32_t>{0, 1, 2, 3}));
  c.policy.confidence = 0.5f;  // 8/15 alone reaches half
  Routing r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, -1, -1, -1}));
  EXPECT_NEAR(r.weights[0], 1.f, 1e-6);
  EXPECT_EQ(r.weights[1], 0.f);
  c.policy.confidence = 0.75f;  // 8/15 is short of it, 12/15 reaches it
  r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, -1, -1}));
  EXPECT_NEAR(r.weights[0], 8.f / 12.f, 1e-6);
  EXPECT_NEAR(r.weights[1], 4.f / 12.f, 1e-6);
  c.policy.confidence = 0.5f;
  c.policy.min_top_k = 3;  // the minimum wins over the share
  r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 2, -1}));
  c.policy.confidence = 1.f;  // 1 (and 0) is plain top-k, bit for bit
  r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, all.experts);
  EXPECT_EQ(r.weights, all.weights);
}

// Without renormalisation the kept experts keep their raw probabilities: what was dropped is lost.
TEST(RouterTest, ConfidenceWithRawWeightsKeepsThem) {
  RouterConfig c{4, 3, false, nullptr};
  c.policy.confidence = 0.7f;  // 6/10 is short of it, 9/10 reaches it
  std::vector<float> logits = {std::log(6.f), std::log(3.f), std::log(1.f), -30.f};
  const Routing r = Route(c, logits, 1);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, -1}));
  const float total = 6.f + 3.f + 1.f + std::exp(-30.f);
  EXPECT_NEAR(r.weights[0], 6.f / total, 1e-6);
}

TEST(RouterTest, RoutingPolicyIsChecked) {
  EXPECT_TRUE(CheckRoutingPolicy({}).ok());
  EXPECT_TRUE(CheckRoutingPolicy({0.9f, 2}).ok());
  EXPECT_EQ(CheckRoutingPolicy({1.5f, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckRoutingPolicy({-0.1f, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckRoutingPolicy({std::nanf(""), 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckRoutingPolicy({0.5f, 0}).code(), absl::StatusCode::kInvalidArgument);
}

// Temperature divides the logits before gating: weights and entropy follow; 1 is exact.
TEST(RouterTest, TemperatureSoftensTheScores) {
  RouterConfig c{3, 2, true, nullptr};
  std::vector<float> logits = {2.f, 1.f, -1.f};
  const Routing plain = Route(c, logits, 1);
  c.policy.temperature = 1.f;
  EXPECT_EQ(Route(c, logits, 1).weights, plain.weights);
  c.policy.temperature = 2.f;
  const Routing soft = Route(c, logits, 1);
  EXPECT_EQ(soft.experts, plain.experts);
  const float e0 = std::exp(1.f), e1 = std::exp(0.5f);
  EXPECT_NEAR(soft.weights[0], e0 / (e0 + e1), 1e-6);
  EXPECT_GT(soft.entropy[0], plain.entropy[0]);
}

// Noise is a function of (seed, layer, position, expert): the same token routes alike alone or in
// a batch, another seed routes otherwise, and the weights stay the clean scores'.
TEST(RouterTest, NoiseIsReproducibleAndChoosesOnly) {
  const int n_expert = 16, n = 64;
  std::vector<float> logits(n * n_expert);
  for (int i = 0; i < n * n_expert; ++i) logits[i] = std::sin(0.37f * i);
  std::vector<int32_t> positions(n);
  for (int t = 0; t < n; ++t) positions[t] = 100 + t;
  RouterConfig c{n_expert, 2, true, nullptr};
  const Routing clean = Route(c, logits, n);
  c.policy.noise = RouterNoise::kGaussian;
  c.policy.noise_scale = 1.f;
  c.policy.noise_seed = 7;
  c.layer = 3;
  c.positions = positions.data();
  const Routing noisy = Route(c, logits, n);
  EXPECT_NE(noisy.experts, clean.experts);
  for (int t = 0; t < n; t += 9) {  // alone, at its own position
    RouterConfig one = c;
    one.positions = &positions[t];
    const Routing r = Route(one, absl::MakeConstSpan(logits).subspan(t * n_expert, n_expert), 1);
    EXPECT_EQ(r.experts[0], noisy.experts[2 * t]);
    EXPECT_EQ(r.experts[1], noisy.experts[2 * t + 1]);
  }
  c.policy.noise_seed = 8;
  EXPECT_NE(Route(c, logits, n).experts, noisy.experts);
  // The weights are the clean softmax renormalised over the chosen two.
  for (int t = 0; t < n; ++t) {
    const float* l = logits.data() + t * n_expert;
    const float a = std::exp(l[noisy.experts[2 * t]]), b = std::exp(l[noisy.experts[2 * t + 1]]);
    EXPECT_NEAR(noisy.weights[2 * t], a / (a + b), 1e-5);
  }
}

// Gumbel noise of scale 1 on softmax logits: the top-1 expert is a draw from the softmax
// probabilities (the Gumbel-max trick), over many positions.
TEST(RouterTest, GumbelTopOneDrawsByProbability) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  const int n = 20000;
  std::vector<float> logits;
  std::vector<int32_t> positions(n);
  for (int t = 0; t < n; ++t) {
    for (double q : p) logits.push_back(static_cast<float>(std::log(q)));
    positions[t] = t;
  }
  RouterConfig c{4, 1, true, nullptr};
  c.policy.noise = RouterNoise::kGumbel;
  c.policy.noise_scale = 1.f;
  c.policy.noise_seed = 11;
  c.positions = positions.data();
  const Routing r = Route(c, logits, n);
  std::vector<int> hits(4, 0);
  for (int32_t e : r.experts) ++hits[e];
  for (int e = 0; e < 4; ++e) {
    // Four standard deviations of a binomial count.
    EXPECT_NEAR(hits[e] / static_cast<double>(n), p[e], 4 * std::sqrt(p[e] * (1 - p[e]) / n))
        << "expert " << e;
  }
}

TEST(RouterTest, TemperatureAndNoiseAreChecked) {
  RoutingPolicy p;
  p.temperature = 0.f;
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p.temperature = INFINITY;
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p = RoutingPolicy();
  p.noise_scale = -1.f;
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p = RoutingPolicy();
  p.noise = static_cast<RouterNoise>(9);
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p = RoutingPolicy();
  p.temperature = 0.5f;
  p.noise = RouterNoise::kGumbel;
  p.noise_scale = 0.3f;
  EXPECT_TRUE(CheckRoutingPolicy(p).ok());
}

// Capacity: 4 tokens x top-2 over 4 experts is 2 per expert at a factor of 1. Every token
// prefers experts 0 and 1: the first two get them, the last two move on to 2 and 3.
TEST(RouterTest, CapacityReroutesTokensPastAFullExpert) {
  RouterConfig c{4, 2, true, nullptr};
  c.policy.capacity_factor = 1.f;
  const std::vector<float> one = {3.f, 2.f, 1.f, 0.f};
  std::vector<float> logits;
  for (int t = 0; t < 4; ++t) logits.insert(logits.end(), one.begin(), one.end());
  Routing r = Route(c, logits, 4);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 0, 1, 2, 3, 2, 3}));
  EXPECT_EQ(r.rerouted, 4);
  EXPECT_EQ(r.dropped, 0);
  // The rerouted tokens' weights renormalise over the experts they got.
  const float e2 = std::exp(1.f), e3 = std::exp(0.f);
  EXPECT_NEAR(r.weights[4], e2 / (e2 + e3), 1e-6);
  // Every expert within its capacity.
  std::vector<int> load(4, 0);
  for (int32_t e : r.experts) ++load[e];
  for (int l : load) EXPECT_LE(l, 2);

  // A generous factor changes nothing; off changes nothing.
  c.policy.capacity_factor = 2.f;
  Routing loose = Route(c, logits, 4);
  c.policy.capacity_factor = 0.f;
  Routing off = Route(c, logits, 4);
  EXPECT_EQ(loose.experts, off.experts);
  EXPECT_EQ(loose.weights, off.weights);
  EXPECT_EQ(loose.rerouted, 0);
}

// A rerouted token keeps its order of preference among the experts it can still get, and one
// token alone is never capped, whatever the factor.
TEST(RouterTest, CapacityKeepsRankOrderAndSparesALoneToken) {
  RouterConfig c{6, 3, true, nullptr};
  c.policy.capacity_factor = 0.5f;
  const std::vector<float> lone = {0.f, 5.f, 4.f, 3.f, 2.f, 1.f};
  Routing alone = Route(c, lone, 1);
  EXPECT_EQ(alone.experts, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(alone.rerouted + alone.dropped, 0);

  // 2 tokens x 3 / 6 experts x 0.5 = 0.5: capacity 1 each. Token 0 takes 1, 2, 3; token 1,
  // preferring 1, 3, 2, 5, 0, 4 in that order, gets 5, 0, 4.
  c.policy.capacity_factor = 0.5f;
  std::vector<float> logits = lone;
  logits.insert(logits.end(), {1.f, 6.f, 4.f, 5.f, 0.f, 3.f});
  Routing r = Route(c, logits, 2);
  EXPECT_EQ(std::vector<int32_t>(r.experts.begin() + 3, r.experts.end()),
            (std::vector<int32_t>{5, 0, 4}));
  EXPECT_EQ(r.rerouted, 3);
  EXPECT_EQ(r.dropped, 0);
}

// Below a factor of 1 the experts may run out of room: the choices left are dropped.
TEST(RouterTest, CapacityDropsWhatNoExpertHasRoomFor) {
  RouterConfig c{2, 2, true, nullptr};
  c.policy.capacity_factor = 0.5f;  // 3 tokens x 2 / 2 x 0.5 = 1.5: 2 per expert
  const std::vector<float> logits = {1.f, 0.f, 1.f, 0.f, 1.f, 0.f};
  Routing r = Route(c, logits, 3);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 0, 1, -1, -1}));
  EXPECT_EQ(r.weights[4], 0.f);
  EXPECT_EQ(r.dropped, 2);
  EXPECT_EQ(r.rerouted, 0);
}

TEST(RouterTest, CapacityAndLoadLimitAreChecked) {
  RoutingPolicy p;
  p.capacity_factor = -1.f;
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p.capacity_factor = NAN;
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p = RoutingPolicy();
  p.load_window = -1;
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p = RoutingPolicy();
  p.load_limit = 0.5f;
  EXPECT_EQ(CheckRoutingPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p = RoutingPolicy();
  p.capacity_factor = 1.25f;
  p.load_window = 32;
  p.load_limit = 1.5f;
  EXPECT_TRUE(CheckRoutingPolicy(p).ok());
}

}  // namespace
}  // namespace moe
