#include "lib/sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "lib/backend/cpu/exp_sum.h"
#include "lib/sampling/logit_search.h"

namespace moe {

int32_t ArgMax(absl::Span<const float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (n == 0) return 0;
  const float* x = logits.data();
  // Each scan stops at a larger value; from a NaN start, any value above -inf replaces it.
  int64_t best = 0;
  float value = std::isnan(x[0]) ? -INFINITY : x[0];
  for (int64_t i = FirstAbove(x, 1, n, value); i < n; i = FirstAbove(x, i + 1, n, value)) {
    best = i;
    value = x[i];
  }
  return static_cast<int32_t>(best);
}

namespace {

// Whether candidate a ranks before b: larger logit, ties to the lower id.
bool Better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

void TopCandidates(absl::Span<const float> logits, size_t k,
                   std::vector<std::pair<float, int32_t>>* out) {
  const int64_t n = static_cast<int64_t>(logits.size());
  k = std::min<size_t>(k, logits.size());
  out->clear();
  if (k == 0) return;
  // A heap whose front is the worst of the best k so far. Ids arrive in ascending order, so a
  // later logit equal to the front's ranks after it: only a strictly larger one gets in, and the
  // scan for it runs vectorised (FirstAbove). A NaN ranks as -inf.
  const float* x = logits.data();
  int64_t i = 0;
  for (; i < n && out->size() < k; ++i) {
    out->push_back({std::isnan(x[i]) ? -INFINITY : x[i], static_cast<int32_t>(i)});
  }
  std::make_heap(out->begin(), out->end(), Better);
  for (i = FirstAbove(x, i, n, out->front().first); i < n;
       i = FirstAbove(x, i + 1, n, out->front().first)) {
    std::pop_heap(out->begin(), out->end(), Better);
    out->back() = {x[i], static_cast<int32_t>(i)};
    std::push_heap(out->begin(), out->end(), Better);
  }
  std::sort_heap(out->begin(), out->end(), Better);
}

Sampler::Sampler(SamplerConfig config) : config_(std::move(config)), rng_(config_.seed) {}

bool Sampler::LikelyCandidates(absl::Span<const float> logits, float temperature, float min_p,
                               float top_p, double* sum_of_rest) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const float* x = logits.data();
  const float max_l = x[ArgMax(logits)];
  if (!std::isfinite(max_l)) return false;
  // min-p keeps token i when e^((x_i - max) / T) >= min_p, i.e. x_i >= max + T ln(min_p): that
  // bound is the last. Top-p alone keeps the best tokens until their share of the whole reaches
  // top_p: a bound is enough once the tokens above it hold more than that, else it goes lower.
  // Each bound is lowered by a margin far above float rounding; the exact tests run later on
  // the candidates as on any others.
  const bool by_min_p = min_p > 0;
  if (!by_min_p && !(top_p < 1.0f)) return false;  // plain temperature: every token may be drawn
  for (double share = by_min_p ? std::min(min_p, 1.0f) : 1e-3; share >= 1e-30; share *= 1e-3) {
    const float bound = max_l + temperature * static_cast<float>(std::log(share));
    const float threshold = bound - 1e-3f * (1.0f + std::fabs(bound));
    candidates_.clear();
    for (int64_t i = FirstAbove(x, 0, n, threshold); i < n;
         i = FirstAbove(x, i + 1, n, threshold)) {
      candidates_.push_back({x[i], static_cast<int32_t>(i)});
    }
    if (candidates_.empty()) return false;
    std::sort(candidates_.begin(), candidates_.end(), Better);
    // The others are exactly those at or below the threshold.
    *sum_of_rest = GetExpSum(ActiveSimdLevel())(x, n, max_l, 1.0f / temperature, threshold);
    if (by_min_p) return true;
    double mass = 0;  // as Sample computes the candidates' terms
    for (const auto& [logit, id] : candidates_) mass += std::exp((logit - max_l) / temperature);
    if (mass >= (static_cast<double>(top_p) + 1e-9) * (mass + *sum_of_rest)) return true;
  }
  return false;
}

int32_t Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> history) {
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  const SamplerConfig& c = config_;
  // Penalties over the recent window.
  if (c.repeat_penalty != 1.0f || c.frequency_penalty != 0.0f || c.presence_penalty != 0.0f) {
    size_t window =
        c.penalty_last_n < 0 ? history.size() : std::min<size_t>(history.size(), c.penalty_last_n);
    absl::flat_hash_map<int32_t, int> counts;
    for (size_t i = history.size() - window; i < history.size(); ++i) counts[history[i]]++;
    for (const auto& [tok, count] : counts) {
      if (tok < 0 || tok >= n_vocab) continue;
      float& l = logits[tok];
      if (c.repeat_penalty != 1.0f) l = l > 0 ? l / c.repeat_penalty : l * c.repeat_penalty;
      l -= count * c.frequency_penalty + c.presence_penalty;
    }
  }
  for (const auto& [tok, bias] : c.logit_bias) {
    if (tok >= 0 && tok < n_vocab) logits[tok] += bias;
  }
  if (c.temperature <= 0.0f) return ArgMax(logits);

  // Candidates sorted by logit (ties: lower id first), cut to top-k. Without a top-k, only the
  // tokens min-p or top-p can keep are sorted (LikelyCandidates), and the softmax's sum over the
  // others comes from one vectorised pass; sorting a whole vocabulary took 3 ms a token at 32k,
  // 24 ms at 201k.
  const size_t top_k = c.top_k > 0 ? std::min<size_t>(c.top_k, n_vocab) : n_vocab;
  double sum_of_rest = 0;  // the softmax terms of tokens that are not candidates
  if (top_k == static_cast<size_t>(n_vocab) &&
      LikelyCandidates(logits, c.temperature, c.min_p, c.top_p, &sum_of_rest)) {
    return DrawFromSorted(candidates_, sum_of_rest, c, rng_, &probabilities_);
  }
  TopCandidates(logits, top_k, &candidates_);
  return DrawFromSorted(candidates_, 0, c, rng_, &probabilities_);
}

int32_t DrawFromSorted(absl::Span<const std::pair<float, int32_t>> candidates, double sum_of_rest,
                       const SamplerConfig& c, std::mt19937_64& rng, std::vector<double>* scratch) {
  const size_t k = candidates.size();
  // Softmax with temperature.
  const float max_l = candidates[0].first;
  double sum = sum_of_rest;
  std::vector<double>& p = *scratch;
  p.assign(k, 0.0);
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::isinf(candidates[i].first) && candidates[i].first < 0
               ? 0.0
               : std::exp((candidates[i].first - max_l) / c.temperature);
    sum += p[i];
  }
  for (auto& v : p) v /= sum;
  // min-p: drop tokens below min_p x the best probability.
  size_t keep = k;
  if (c.min_p > 0) {
    while (keep > 1 && p[keep - 1] < c.min_p * p[0]) --keep;
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (c.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += p[i];
      if (mass >= c.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  std::uniform_real_distribution<double> uni(0.0, total);
  double r = uni(rng);
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return candidates[i].second;
  }
  return candidates[keep - 1].second;
}

}  // namespace moe
