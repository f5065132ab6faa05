// Top-k gating: turns router logits into the experts each token runs and their weights.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/moe/gating.h"
#include "lib/moe/route_token.h"

namespace moe {

enum class RouterNoise { kNone = 0, kGaussian = 1, kGumbel = 2 };

// The routing choices a caller makes for a context or engine (the model fixes the rest of
// RouterConfig). The default routes as the model does, bit for bit.
struct RoutingPolicy {
  // Dynamic top-k by confidence: a token keeps its best experts, in order, until their scores
  // reach `confidence` of what its top_k best sum to, and at least min_top_k of them (the
  // weights then renormalise over those kept when the model renormalises). 0 (or 1): always
  // top_k.
  float confidence = 0.f;
  int min_top_k = 1;
  // Router temperature: the logits are divided by it before gating, for the choice and the
  // weights alike (1: as the model routes).
  float temperature = 1.f;
  // Noise on the logits that choose the experts (the weights come from the clean scores):
  // Gaussian of standard deviation noise_scale, or Gumbel of scale noise_scale (with softmax
  // gating and scale 1, the top-k of logits plus Gumbel noise draws experts by their
  // probabilities, without replacement). Drawn from a hash of (noise_seed, layer, position,
  // expert): reproducible, and a token's the same in any batch. Needs RouterConfig::positions.
  RouterNoise noise = RouterNoise::kNone;
  float noise_scale = 0.f;
  uint64_t noise_seed = 0;
  // Capacity with re-routing: in a step of n tokens no expert takes more than
  // ceil(capacity_factor x n x top_k / n_expert) of them (the factor times its fair share).
  // Tokens claim experts in batch order; a token whose choice is full takes its next best
  // expert with room (Routing::rerouted), or runs fewer experts when no other has room
  // (Routing::dropped: below a factor of 1, or at about 1 for the step's last tokens, whose
  // room may lie in experts they already took). A token alone is never capped. 0: no cap.
  float capacity_factor = 0.f;
  // Load-aware re-weighting (RoutingHistory): over the load_window tokens before each token (of
  // its own sequence), an expert chosen more than load_limit x its fair share 1 / n_expert of
  // the layer's choices has its weight scaled down by that excess and the token's other experts'
  // weights scaled up to keep their sum. Which experts the token runs in that layer does not
  // change (later layers see the re-weighted output). 0: off.
  int load_window = 0;
  float load_limit = 2.f;
};

struct RouterConfig {
  int n_expert = 0;
  int top_k = 0;
  bool renormalize = true;  // scale the k chosen scores to sum to 1
  // Experts a caller has switched off (null or empty = all allowed). A masked expert is never
  // chosen; scores are still those over all experts, so weights keep their meaning.
  const std::vector<bool>* disabled = nullptr;
  Gating gating = Gating::kSoftmax;
  // Added to the scores to choose experts, not to weight them (DeepSeek-V3's and GLM-4.5's
  // exp_probs_b); null = none.
  const float* selection_bias = nullptr;
  // Group-limited choice: the experts form n_groups equal groups, each scored by the sum of its
  // two best selection scores; only the n_groups_used best groups' experts may be chosen.
  int n_groups = 1;
  int n_groups_used = 1;
  float scale = 1.f;  // the weights, renormalised or not, are multiplied by it
  // The caller's choices on top (dynamic top-k, temperature, noise: see RoutingPolicy); the
  // default policy routes as the model does.
  RoutingPolicy policy = {};
  int layer = 0;                       // the layer routed, for the noise
  const int32_t* positions = nullptr;  // [n_tokens], for the noise
};

// An error naming the value unless confidence is in [0, 1], min_top_k at least 1, the
// temperature positive and finite, the noise a known kind, its scale and the capacity factor
// finite and >= 0, the load window >= 0 and the load limit a number >= 1.
absl::Status CheckRoutingPolicy(const RoutingPolicy& policy);

struct Routing {
  // [n_tokens x top_k], best first.
  std::vector<int32_t> experts;
  std::vector<float> weights;
  // Per-token entropy (nats) of the scores over all experts, normalised to sum 1 (softmax: its
  // distribution): how decided the router was.
  std::vector<float> entropy;
  // Under a capacity (RoutingPolicy::capacity_factor): choices moved to a later expert because
  // theirs was full, and choices left out because no allowed expert had room.
  int64_t rerouted = 0;
  int64_t dropped = 0;
};

// The per-token part of a config as the shared routing core takes it (route_token.h); a
// disabled-expert mask is copied into `disabled`, which must outlive the result.
TokenRouting TokenRoutingOf(const RouterConfig& config, std::vector<uint8_t>* disabled);

// Each of n tokens routed on its own by route_token.h's core (Route without a capacity): logits
// [n x c.n_expert], positions [n] for the noise (null: none); experts and weights [n x c.top_k],
// entropy [n]. The CPU backend's RouteTokens.
void RouteEachToken(const TokenRouting& c, const float* logits, const int32_t* positions, int64_t n,
                    int32_t* experts, float* weights, float* entropy);

// logits: [n_tokens x n_expert] in F32. Scores by the gating function, then top-k by score plus
// selection bias within the allowed groups (ties: lower expert id first), weighted by score.
Routing Route(const RouterConfig& config, absl::Span<const float> logits, int64_t n_tokens);
// The same into `out`, reusing its storage (no allocation once it has grown: the decode path).
void Route(const RouterConfig& config, absl::Span<const float> logits, int64_t n_tokens,
           Routing* out);

}  // namespace moe
