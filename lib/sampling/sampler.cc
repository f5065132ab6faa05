#include "lib/sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"

namespace moe {

int32_t ArgMax(absl::Span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(SamplerConfig config) : config_(std::move(config)), rng_(config_.seed) {}

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

  // Candidates sorted by logit (ties: lower id first), cut to top-k.
  candidates_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) candidates_[i] = {logits[i], i};
  auto better = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t k = c.top_k > 0 ? std::min<size_t>(c.top_k, n_vocab) : n_vocab;
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), better);
  candidates_.resize(k);
  // Softmax with temperature.
  const float max_l = candidates_[0].first;
  double sum = 0;
  std::vector<double> p(k);
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::isinf(candidates_[i].first) && candidates_[i].first < 0
               ? 0.0
               : std::exp((candidates_[i].first - max_l) / c.temperature);
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
  double r = uni(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace moe
