// The sampler chain: penalties and biases on the logits, then greedy or
// temperature / top-k / top-p / min-p sampling with a seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace moe {

struct SamplerConfig {
  float temperature = 0.8f;        // <= 0: greedy
  int32_t top_k = 40;              // <= 0: all tokens
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off (CTRL-style: divide positive logits, multiply negative)
  float frequency_penalty = 0.0f;  // subtract count * this
  float presence_penalty = 0.0f;   // subtract this once a token appeared
  int32_t penalty_last_n = 64;     // how many recent tokens the penalties look at (-1: all)
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);

  // Picks the next token from logits (modified in place by penalties and biases), given the
  // tokens so far. Deterministic for a given seed and history.
  int32_t Sample(absl::Span<float> logits, absl::Span<const int32_t> history);

  const SamplerConfig& config() const { return config_; }
  void Reseed(uint64_t seed) { rng_.seed(seed); }

 private:
  // Without a top-k: the tokens min-p (or, without it, top-p) could keep, sorted, into
  // candidates_, and into sum_of_rest the softmax terms (with the largest logit's term 1) of
  // all the others. False when every token must be sorted: neither min-p nor top-p is on, no
  // logit is finite, or top-p reaches into the smallest terms.
  bool LikelyCandidates(absl::Span<const float> logits, float temperature, float min_p, float top_p,
                        double* sum_of_rest);

  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // reused between calls
  std::vector<double> probabilities_;                  // the candidates', reused
};

// Index of the largest value; ties go to the lowest index. A NaN is never the largest (unless
// nothing else is above -inf: then index 0).
int32_t ArgMax(absl::Span<const float> logits);

// The k best (logit, id) pairs (larger logit first, ties to the lower id; a NaN logit ranks as
// -inf), sorted, into out: what sorting all of them and keeping the first k gives, found in
// one scan of the logits.
void TopCandidates(absl::Span<const float> logits, size_t k,
                   std::vector<std::pair<float, int32_t>>* out);

// The sampler's steps after choosing its candidates (sorted best first, at least one): the
// softmax with temperature over them, whose sum also takes sum_of_rest (the terms of tokens left
// out, the best candidate's term being 1), then min-p, top-p and one draw from rng. scratch holds
// the probabilities.
int32_t DrawFromSorted(absl::Span<const std::pair<float, int32_t>> candidates, double sum_of_rest,
                       const SamplerConfig& c, std::mt19937_64& rng, std::vector<double>* scratch);

}  // namespace moe
