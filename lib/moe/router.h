// Top-k gating: turns router logits into the experts each token runs and their weights.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace moe {

struct RouterConfig {
  int n_expert = 0;
  int top_k = 0;
  bool renormalize = true;  // scale the k chosen probabilities to sum to 1
  // Experts a caller has switched off (null or empty = all allowed). A masked expert is never
  // chosen; probabilities are still the softmax over all experts, so weights keep their meaning.
  const std::vector<bool>* disabled = nullptr;
};

struct Routing {
  // [n_tokens x top_k], best first.
  std::vector<int32_t> experts;
  std::vector<float> weights;
  // Per-token entropy (nats) of the full softmax distribution: how decided the router was.
  std::vector<float> entropy;
};

// logits: [n_tokens x n_expert] in F32. Softmax over all experts, then top-k by probability
// (ties: lower expert id first).
Routing Route(const RouterConfig& config, absl::Span<const float> logits, int64_t n_tokens);
// The same into `out`, reusing its storage (no allocation once it has grown: the decode path).
void Route(const RouterConfig& config, absl::Span<const float> logits, int64_t n_tokens,
           Routing* out);

}  // namespace moe
