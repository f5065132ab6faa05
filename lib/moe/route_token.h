// One token's routing, from its router logits to its experts and their weights: the steps the
// CPU router (router.cc) runs for each token, written once as MOE_HOST_DEVICE functions so that
// the CUDA router kernel (kernels/route.cu) makes the same choices by the same arithmetic
// (issue 21's one numeric core). Plain loops over caller-owned scratch: no allocation, no
// standard algorithms, nothing a device cannot run.
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/base/host_device.h"
#include "lib/moe/gating.h"

namespace moe {

// The smallest normal F16, as llama.cpp bounds the sum it renormalises by.
inline constexpr float kMinRoutingWeightSum = 6.103515625e-5f;

// What a token's routing depends on besides its logits: RouterConfig and RoutingPolicy in plain
// values (the per-step capacity is the router's, across tokens).
struct TokenRouting {
  int n_expert = 0;
  int top_k = 0;
  bool renormalize = true;
  Gating gating = Gating::kSoftmax;
  const float* selection_bias = nullptr;  // [n_expert] or null
  const uint8_t* disabled = nullptr;      // [n_expert], nonzero = never chosen; or null
  int n_groups = 1;
  int n_groups_used = 1;
  float scale = 1.f;
  float temperature = 1.f;
  float confidence = 0.f;  // dynamic top-k (RoutingPolicy::confidence); 0 or 1: always top_k
  int min_top_k = 1;
  // Noise on the logits that choose (RoutingPolicy): 0 none, 1 Gaussian, 2 Gumbel.
  int noise = 0;
  float noise_scale = 0.f;
  uint64_t noise_seed = 0;
  int layer = 0;
};

// Scratch of one token: n_expert floats each for probs, sel and work, n_expert ids in order,
// n_groups floats in group_score and n_groups ids in groups.
struct TokenRoutingScratch {
  float* probs;
  float* sel;
  float* work;
  int32_t* order;
  float* group_score;
  int32_t* groups;
};

// SplitMix64: a well-mixed 64-bit value of a key, for noise that depends on nothing but the key.
MOE_HOST_DEVICE inline uint64_t RoutingMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform value in (0, 1) for the key.
MOE_HOST_DEVICE inline double RoutingUniform(uint64_t key) {
  return (static_cast<double>(RoutingMix(key) >> 11) + 0.5) * 0x1p-53;
}

// The noise of one (layer, position, expert): standard Gaussian (Box-Muller) or standard Gumbel.
MOE_HOST_DEVICE inline float RoutingNoiseAt(const TokenRouting& c, int32_t position, int expert) {
  const uint64_t key = RoutingMix(c.noise_seed ^ RoutingMix(static_cast<uint64_t>(c.layer) << 40 ^
                                                            static_cast<uint64_t>(position) << 20 ^
                                                            static_cast<uint64_t>(expert)));
  const double u1 = RoutingUniform(key);
  if (c.noise == 2) return static_cast<float>(-log(-log(u1)));
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return static_cast<float>(sqrt(-2 * log(u1)) * cos(kTwoPi * RoutingUniform(key + 1)));
}

// Gating scores of n logits (softmax, or sigmoid) into out; returns the entropy (nats) of the
// scores normalised to sum 1. A softmax's entropy is log S - sum p (l - max), S the sum of the
// exponentials: one logarithm a token rather than one an expert (256 an expert layer's token
// with DeepSeek-V3's experts, on the serial path between the router and the experts).
MOE_HOST_DEVICE inline float GateScores(Gating gating, const float* l, int n, float* out) {
  float e_sum = 0;
  if (gating == Gating::kSoftmax) {
    float max_l = l[0];
    for (int e = 1; e < n; ++e) max_l = l[e] > max_l ? l[e] : max_l;
    float sum = 0;
    for (int e = 0; e < n; ++e) sum += out[e] = expf(l[e] - max_l);
    float weighted = 0;  // sum of exp(l - max) (l - max) over the experts that take a share
    for (int e = 0; e < n; ++e) {
      if (out[e] > 0) weighted += out[e] * (l[e] - max_l);
      out[e] /= sum;
    }
    e_sum = logf(sum) - weighted / sum;
    e_sum = e_sum > 0 ? e_sum : 0.f;  // one expert taking it all: 0 less rounding
  } else {
    float sum = 0;
    for (int e = 0; e < n; ++e) sum += out[e] = 1.f / (1.f + expf(-l[e]));
    for (int e = 0; e < n; ++e) {
      const float p = sum > 0 ? out[e] / sum : 0.f;
      if (p > 0) e_sum -= p * logf(p);
    }
  }
  return e_sum;
}

// Scores the token: s.probs = gating scores of its (temperature-scaled) logits, which weight the
// experts; returns the scores the choice ranks (of noisy logits with noise, plus the selection
// bias), which live in s.probs, s.sel or s.work. Writes the entropy of the clean scores.
MOE_HOST_DEVICE inline const float* ScoreToken(const TokenRouting& c, const float* logits,
                                               int32_t position, TokenRoutingScratch s,
                                               float* entropy) {
  const float* l = logits;
  if (c.temperature != 1.f) {
    for (int e = 0; e < c.n_expert; ++e) s.work[e] = logits[e] / c.temperature;
    l = s.work;
  }
  *entropy = GateScores(c.gating, l, c.n_expert, s.probs);
  const float* sel = s.probs;
  if (c.noise != 0 && c.noise_scale > 0.f && position >= 0) {
    // The noisy logits go to sel, then their scores over them (element by element, so in place).
    for (int e = 0; e < c.n_expert; ++e) {
      s.sel[e] = l[e] + c.noise_scale * RoutingNoiseAt(c, position, e);
    }
    GateScores(c.gating, s.sel, c.n_expert, s.sel);
    sel = s.sel;
  }
  if (c.selection_bias != nullptr) {
    float* biased = sel == s.sel ? s.sel : s.work;
    for (int e = 0; e < c.n_expert; ++e) biased[e] = sel[e] + c.selection_bias[e];
    sel = biased;
  }
  return sel;
}

// Whether expert a ranks before b: higher score, then lower id.
MOE_HOST_DEVICE inline bool RanksBefore(const float* sel, int32_t a, int32_t b) {
  return sel[a] > sel[b] || (sel[a] == sel[b] && a < b);
}

// s.order[0..n) = the experts the token may choose, by id: not disabled and, with groups
// limited, in the n_groups_used best groups, each group scored by the sum of its two best
// allowed selection scores (a group left one allowed expert scores by it alone; ties: lower
// group first). Returns n.
MOE_HOST_DEVICE inline int AllowedExperts(const TokenRouting& c, const float* sel,
                                          TokenRoutingScratch s) {
  const bool limit_groups = c.n_groups > 1 && c.n_groups_used < c.n_groups;
  const int per_group = limit_groups ? c.n_expert / c.n_groups : c.n_expert;
  if (limit_groups) {
    for (int g = 0; g < c.n_groups; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (c.disabled != nullptr && c.disabled[e]) continue;
        if (sel[e] > best) {
          second = best;
          best = sel[e];
        } else if (sel[e] > second) {
          second = sel[e];
        }
      }
      s.group_score[g] = per_group > 1 && second > -INFINITY ? best + second : best;
      s.groups[g] = g;
    }
    // The n_groups_used best groups to the front, best first (a selection: few groups).
    for (int i = 0; i < c.n_groups_used; ++i) {
      int best = i;
      for (int j = i + 1; j < c.n_groups; ++j) {
        if (RanksBefore(s.group_score, s.groups[j], s.groups[best])) best = j;
      }
      const int32_t tmp = s.groups[i];
      s.groups[i] = s.groups[best];
      s.groups[best] = tmp;
    }
  }
  int n = 0;
  for (int e = 0; e < c.n_expert; ++e) {
    if (c.disabled != nullptr && c.disabled[e]) continue;
    if (limit_groups) {
      bool kept = false;
      for (int i = 0; i < c.n_groups_used; ++i) kept = kept || s.groups[i] == e / per_group;
      if (!kept) continue;
    }
    s.order[n++] = e;
  }
  return n;
}

// Moves the k best of order[0..n) (RanksBefore) to its front, best first.
MOE_HOST_DEVICE inline void SelectBest(const float* sel, int32_t* order, int n, int k) {
  for (int i = 0; i < k && i < n; ++i) {
    int best = i;
    for (int j = i + 1; j < n; ++j) {
      if (RanksBefore(sel, order[j], order[best])) best = j;
    }
    const int32_t tmp = order[i];
    order[i] = order[best];
    order[best] = tmp;
  }
}

// How many of the k best (order[0..k), best first) reach the confidence share of their summed
// scores, at least min_top_k; k without a confidence.
MOE_HOST_DEVICE inline int ConfidentCount(const TokenRouting& c, const float* probs,
                                          const int32_t* order, int k) {
  if (!(c.confidence > 0.f && c.confidence < 1.f)) return k;
  float total = 0;
  for (int j = 0; j < k; ++j) total += probs[order[j]];
  const float needed = c.confidence * total;
  float kept = 0;
  for (int j = 0; j < k; ++j) {
    kept += probs[order[j]];
    if (j + 1 >= c.min_top_k && kept >= needed) return j + 1;
  }
  return k;
}

// The token's top_k slots from its k chosen experts (order[0..k), best first): their ids and
// weights (scores, renormalised over the k and scaled as the model says), then -1 and 0.
MOE_HOST_DEVICE inline void WriteChoices(const TokenRouting& c, const float* probs,
                                         const int32_t* order, int k, int32_t* experts,
                                         float* weights) {
  float chosen = 0;
  for (int j = 0; j < k; ++j) chosen += probs[order[j]];
  if (c.renormalize) chosen = chosen > kMinRoutingWeightSum ? chosen : kMinRoutingWeightSum;
  for (int j = 0; j < c.top_k; ++j) {
    const bool valid = j < k;
    experts[j] = valid ? order[j] : -1;
    float w = valid ? probs[order[j]] : 0.f;
    if (c.renormalize && chosen > 0) w /= chosen;
    if (c.scale != 1.f) w *= c.scale;
    weights[j] = w;
  }
}

// The whole routing of one token without a capacity: its top_k slots in experts and weights
// ([top_k] each, best first) and the entropy of its scores. position < 0: no noise.
MOE_HOST_DEVICE inline void RouteToken(const TokenRouting& c, const float* logits, int32_t position,
                                       TokenRoutingScratch s, int32_t* experts, float* weights,
                                       float* entropy) {
  const float* sel = ScoreToken(c, logits, position, s, entropy);
  const int allowed = AllowedExperts(c, sel, s);
  int k = c.top_k < allowed ? c.top_k : allowed;
  SelectBest(sel, s.order, allowed, k);
  k = ConfidentCount(c, s.probs, s.order, k);
  WriteChoices(c, s.probs, s.order, k, experts, weights);
}

}  // namespace moe
