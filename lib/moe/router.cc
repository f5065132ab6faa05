#include "lib/moe/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

// The smallest normal F16, as llama.cpp bounds the sum it renormalises by.
constexpr float kMinWeightSum = 6.103515625e-5f;

// Marks the experts outside the n_groups_used best groups, each group scored by the sum of its
// two best selection scores among its allowed experts (ties: lower group first).
void MaskGroups(const RouterConfig& c, const float* sel, std::vector<char>* masked) {
  const bool has_disabled = c.disabled != nullptr && !c.disabled->empty();
  thread_local std::vector<float> group_score;
  thread_local std::vector<int32_t> groups;
  const int per_group = c.n_expert / c.n_groups;
  group_score.resize(c.n_groups);
  groups.resize(c.n_groups);
  for (int g = 0; g < c.n_groups; ++g) {
    float best = -INFINITY, second = -INFINITY;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (has_disabled && (*c.disabled)[e]) continue;
      if (sel[e] > best) {
        second = best;
        best = sel[e];
      } else if (sel[e] > second) {
        second = sel[e];
      }
    }
    // A group left one allowed expert scores by it alone.
    group_score[g] = per_group > 1 && second > -INFINITY ? best + second : best;
  }
  std::iota(groups.begin(), groups.end(), 0);
  std::partial_sort(
      groups.begin(), groups.begin() + c.n_groups_used, groups.end(), [&](int32_t a, int32_t b) {
        return group_score[a] > group_score[b] || (group_score[a] == group_score[b] && a < b);
      });
  masked->assign(c.n_expert, 1);
  for (int i = 0; i < c.n_groups_used; ++i) {
    std::fill_n(masked->begin() + groups[i] * per_group, per_group, 0);
  }
}

// How many of the k best (order[0..k), best first) reach the confidence share of their summed
// scores, at least min_top_k.
int ConfidentCount(const RouterConfig& c, const float* probs, const std::vector<int32_t>& order,
                   int k) {
  float total = 0;
  for (int j = 0; j < k; ++j) total += probs[order[j]];
  const float needed = c.policy.confidence * total;
  float kept = 0;
  for (int j = 0; j < k; ++j) {
    kept += probs[order[j]];
    if (j + 1 >= c.policy.min_top_k && kept >= needed) return j + 1;
  }
  return k;
}

// Gating scores of n logits (softmax, or sigmoid) into out; with entropy, also the entropy of the
// scores normalised to sum 1.
void GateScores(Gating gating, const float* l, int n, float* out, float* entropy) {
  float e_sum = 0;
  if (gating == Gating::kSoftmax) {
    float max_l = *std::max_element(l, l + n);
    float sum = 0;
    for (int e = 0; e < n; ++e) sum += out[e] = std::exp(l[e] - max_l);
    for (int e = 0; e < n; ++e) {
      out[e] /= sum;
      if (out[e] > 0) e_sum -= out[e] * std::log(out[e]);
    }
  } else {
    float sum = 0;
    for (int e = 0; e < n; ++e) sum += out[e] = 1.f / (1.f + std::exp(-l[e]));
    for (int e = 0; e < n; ++e) {
      const float p = sum > 0 ? out[e] / sum : 0.f;
      if (p > 0) e_sum -= p * std::log(p);
    }
  }
  if (entropy != nullptr) *entropy = e_sum;
}

// SplitMix64: a well-mixed 64-bit value of a key, for noise that depends on nothing but the key.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform value in (0, 1) for the key.
double Uniform(uint64_t key) { return (static_cast<double>(Mix(key) >> 11) + 0.5) * 0x1p-53; }

// The noise of one (layer, position, expert): standard Gaussian (Box-Muller) or standard Gumbel.
float NoiseAt(const RouterConfig& c, int32_t position, int expert) {
  const uint64_t key = Mix(c.policy.noise_seed ^ Mix(static_cast<uint64_t>(c.layer) << 40 ^
                                              static_cast<uint64_t>(position) << 20 ^
                                              static_cast<uint64_t>(expert)));
  const double u1 = Uniform(key);
  if (c.policy.noise == RouterNoise::kGumbel) return static_cast<float>(-std::log(-std::log(u1)));
  return static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * Uniform(key + 1)));
}

// Moves the first k experts of order[..allowed_end) that have room to the front, keeping their
// rank order, counts them into `load`, and returns how many there were (k unless too few had
// room). Of the k best, those that were full count as rerouted when a later expert took their
// place, as dropped when none could.
int ClaimWithin(int64_t capacity, int k, std::vector<int32_t>& order,
                std::vector<int32_t>::iterator allowed_end, std::vector<int32_t>* load,
                Routing* r) {
  int full = 0;
  for (int j = 0; j < k; ++j) full += (*load)[order[j]] >= capacity;
  int taken = 0;
  // Everything between order[taken] and the expert claimed was full, so a swap moves a full
  // expert back and the claimed one forward past only full ones: rank order holds.
  for (auto it = order.begin(); it != allowed_end && taken < k; ++it) {
    if ((*load)[*it] >= capacity) continue;
    std::swap(order[taken++], *it);
  }
  for (int j = 0; j < taken; ++j) ++(*load)[order[j]];
  r->rerouted += taken - (k - full);
  r->dropped += k - taken;
  return taken;
}

}  // namespace

void Route(const RouterConfig& c, absl::Span<const float> logits, int64_t n_tokens, Routing* out) {
  Routing& r = *out;
  r.experts.resize(n_tokens * c.top_k);
  r.weights.resize(n_tokens * c.top_k);
  r.entropy.resize(n_tokens);
  r.rerouted = 0;
  r.dropped = 0;
  thread_local std::vector<float> probs, biased, scaled, noisy;
  thread_local std::vector<int32_t> order;
  thread_local std::vector<char> masked;
  thread_local std::vector<int32_t> load;
  const bool capped = c.policy.capacity_factor > 0.f && n_tokens > 1;
  int64_t capacity = 0;
  if (capped) {
    capacity = static_cast<int64_t>(
        std::ceil(static_cast<double>(c.policy.capacity_factor) * n_tokens * c.top_k / c.n_expert));
    load.assign(c.n_expert, 0);
  }
  probs.resize(c.n_expert);
  order.resize(c.n_expert);
  const bool limit_groups = c.n_groups > 1 && c.n_groups_used < c.n_groups;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* l = logits.data() + t * c.n_expert;
    if (c.policy.temperature != 1.f) {
      scaled.resize(c.n_expert);
      for (int e = 0; e < c.n_expert; ++e) scaled[e] = l[e] / c.policy.temperature;
      l = scaled.data();
    }
    GateScores(c.gating, l, c.n_expert, probs.data(), &r.entropy[t]);
    // What the choice ranks: the scores (of noisy logits, with noise), plus the selection bias
    // where there is one.
    const float* sel = probs.data();
    if (c.policy.noise != RouterNoise::kNone && c.policy.noise_scale > 0.f && c.positions != nullptr) {
      noisy.resize(2 * c.n_expert);
      for (int e = 0; e < c.n_expert; ++e) {
        noisy[c.n_expert + e] = l[e] + c.policy.noise_scale * NoiseAt(c, c.positions[t], e);
      }
      GateScores(c.gating, noisy.data() + c.n_expert, c.n_expert, noisy.data(), nullptr);
      sel = noisy.data();
    }
    if (c.selection_bias != nullptr) {
      biased.resize(c.n_expert);
      for (int e = 0; e < c.n_expert; ++e) biased[e] = sel[e] + c.selection_bias[e];
      sel = biased.data();
    }
    if (limit_groups) MaskGroups(c, sel, &masked);
    std::iota(order.begin(), order.end(), 0);
    auto allowed_end = order.end();
    const bool has_disabled = c.disabled != nullptr && !c.disabled->empty();
    if (has_disabled || limit_groups) {
      // In place and order-keeping without stable_partition's buffer.
      allowed_end = std::remove_if(order.begin(), order.end(), [&](int32_t e) {
        return (has_disabled && (*c.disabled)[e]) || (limit_groups && masked[e]);
      });
    }
    int k = std::min<int>(c.top_k, static_cast<int>(allowed_end - order.begin()));
    const auto better = [&](int32_t a, int32_t b) {
      return sel[a] > sel[b] || (sel[a] == sel[b] && a < b);
    };
    // Under a capacity every allowed expert is ranked: the full ones give way to later ones.
    std::partial_sort(order.begin(), capped ? allowed_end : order.begin() + k, allowed_end, better);
    if (c.policy.confidence > 0.f && c.policy.confidence < 1.f) {
      k = ConfidentCount(c, probs.data(), order, k);
    }
    if (capped) k = ClaimWithin(capacity, k, order, allowed_end, &load, &r);
    float chosen = 0;
    for (int j = 0; j < k; ++j) chosen += probs[order[j]];
    if (c.renormalize) chosen = std::max(chosen, kMinWeightSum);
    for (int j = 0; j < c.top_k; ++j) {
      bool valid = j < k;
      r.experts[t * c.top_k + j] = valid ? order[j] : -1;
      float w = valid ? probs[order[j]] : 0.f;
      if (c.renormalize && chosen > 0) w /= chosen;
      if (c.scale != 1.f) w *= c.scale;
      r.weights[t * c.top_k + j] = w;
    }
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
