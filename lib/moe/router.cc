#include "lib/moe/router.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

// Moves the first k experts of order[..allowed) that have room to the front, keeping their
// rank order, counts them into `load`, and returns how many there were (k unless too few had
// room). Of the k best, those that were full count as rerouted when a later expert took their
// place, as dropped when none could.
int ClaimWithin(int64_t capacity, int k, int32_t* order, int allowed, std::vector<int32_t>* load,
                Routing* r) {
  int full = 0;
  for (int j = 0; j < k; ++j) full += (*load)[order[j]] >= capacity;
  int taken = 0;
  // Everything between order[taken] and the expert claimed was full, so a swap moves a full
  // expert back and the claimed one forward past only full ones: rank order holds.
  for (int i = 0; i < allowed && taken < k; ++i) {
    if ((*load)[order[i]] >= capacity) continue;
    std::swap(order[taken++], order[i]);
  }
  for (int j = 0; j < taken; ++j) ++(*load)[order[j]];
  r->rerouted += taken - (k - full);
  r->dropped += k - taken;
  return taken;
}

}  // namespace

TokenRouting TokenRoutingOf(const RouterConfig& c, std::vector<uint8_t>* disabled) {
  TokenRouting t;
  t.n_expert = c.n_expert;
  t.top_k = c.top_k;
  t.renormalize = c.renormalize;
  t.gating = c.gating;
  t.selection_bias = c.selection_bias;
  if (c.disabled != nullptr && !c.disabled->empty()) {
    disabled->assign(c.disabled->begin(), c.disabled->end());
    t.disabled = disabled->data();
  }
  t.n_groups = c.n_groups;
  t.n_groups_used = c.n_groups_used;
  t.scale = c.scale;
  t.temperature = c.policy.temperature;
  t.confidence = c.policy.confidence;
  t.min_top_k = c.policy.min_top_k;
  t.noise = static_cast<int>(c.policy.noise);
  t.noise_scale = c.policy.noise_scale;
  t.noise_seed = c.policy.noise_seed;
  t.layer = c.layer;
  return t;
}

namespace {

// One token's scratch for the routing core, kept by the calling thread (a decode step allocates
// nothing once it has grown).
struct ThreadScratch {
  std::vector<float> probs, sel, work, group_score;
  std::vector<int32_t> order, groups;

  TokenRoutingScratch For(int n_expert, int n_groups) {
    probs.resize(n_expert);
    sel.resize(n_expert);
    work.resize(n_expert);
    order.resize(n_expert);
    group_score.resize(std::max(n_groups, 1));
    groups.resize(std::max(n_groups, 1));
    return {probs.data(), sel.data(), work.data(), order.data(), group_score.data(), groups.data()};
  }
};

thread_local ThreadScratch scratch;

}  // namespace

void RouteEachToken(const TokenRouting& c, const float* logits, const int32_t* positions, int64_t n,
                    int32_t* experts, float* weights, float* entropy) {
  const TokenRoutingScratch s = scratch.For(c.n_expert, c.n_groups);
  for (int64_t t = 0; t < n; ++t) {
    RouteToken(c, logits + t * c.n_expert, positions ? positions[t] : -1, s, experts + t * c.top_k,
               weights + t * c.top_k, entropy + t);
  }
}

void Route(const RouterConfig& c, absl::Span<const float> logits, int64_t n_tokens, Routing* out) {
  Routing& r = *out;
  r.experts.resize(n_tokens * c.top_k);
  r.weights.resize(n_tokens * c.top_k);
  r.entropy.resize(n_tokens);
  r.rerouted = 0;
  r.dropped = 0;
  thread_local std::vector<int32_t> load;
  thread_local std::vector<uint8_t> disabled;
  const TokenRouting tr = TokenRoutingOf(c, &disabled);
  const bool capped = c.policy.capacity_factor > 0.f && n_tokens > 1;
  if (!capped) {
    RouteEachToken(tr, logits.data(), c.positions, n_tokens, r.experts.data(), r.weights.data(),
                   r.entropy.data());
    return;
  }
  const TokenRoutingScratch s = scratch.For(c.n_expert, c.n_groups);
  std::vector<float>& probs = scratch.probs;
  std::vector<int32_t>& order = scratch.order;
  // Under a capacity every allowed expert is ranked, token after token: the full ones give way
  // to later ones.
  const int64_t capacity = static_cast<int64_t>(
      std::ceil(static_cast<double>(c.policy.capacity_factor) * n_tokens * c.top_k / c.n_expert));
  load.assign(c.n_expert, 0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* ranked = ScoreToken(tr, logits.data() + t * c.n_expert,
                                     c.positions ? c.positions[t] : -1, s, &r.entropy[t]);
    const int allowed = AllowedExperts(tr, ranked, s);
    std::sort(order.begin(), order.begin() + allowed,
              [&](int32_t a, int32_t b) { return RanksBefore(ranked, a, b); });
    int k = std::min(c.top_k, allowed);
    k = ConfidentCount(tr, probs.data(), order.data(), k);
    k = ClaimWithin(capacity, k, order.data(), allowed, &load, &r);
    WriteChoices(tr, probs.data(), order.data(), k, &r.experts[t * c.top_k],
                 &r.weights[t * c.top_k]);
  }
}

absl::Status CheckRoutingPolicy(const RoutingPolicy& p) {
  if (!(p.confidence >= 0.f && p.confidence <= 1.f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert confidence ", p.confidence, " is outside [0, 1]"));
  }
  if (p.min_top_k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the minimum number of experts per token is ", p.min_top_k, ", not >= 1"));
  }
  if (!(p.temperature > 0.f) || !std::isfinite(p.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("router temperature ", p.temperature, " is not a positive number"));
  }
  if (p.noise != RouterNoise::kNone && p.noise != RouterNoise::kGaussian &&
      p.noise != RouterNoise::kGumbel) {
    return absl::InvalidArgumentError(
        absl::StrCat("router noise kind ", static_cast<int>(p.noise), " is unknown"));
  }
  if (!(p.noise_scale >= 0.f) || !std::isfinite(p.noise_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("router noise scale ", p.noise_scale, " is not a number >= 0"));
  }
  if (!(p.capacity_factor >= 0.f) || !std::isfinite(p.capacity_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert capacity factor ", p.capacity_factor, " is not a number >= 0"));
  }
  if (p.load_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the load window of ", p.load_window, " tokens is negative"));
  }
  if (!(p.load_limit >= 1.f) || !std::isfinite(p.load_limit)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "load limit ", p.load_limit, " is not a number >= 1 (a multiple of the fair share)"));
  }
  return absl::OkStatus();
}

Routing Route(const RouterConfig& c, absl::Span<const float> logits, int64_t n_tokens) {
  Routing r;
  Route(c, logits, n_tokens, &r);
  return r;
}

}  // namespace moe
