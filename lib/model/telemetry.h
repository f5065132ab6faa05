// What one forward call did: which experts ran, how many weight bytes it read, where time went.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace moe {

struct StageTimes {
  double attention_s = 0;
  double router_s = 0;
  double experts_s = 0;  // routed and shared experts
  double head_s = 0;     // final norm and output projection
  double other_s = 0;    // embedding, norms, residuals

  StageTimes& operator+=(const StageTimes& o);
};

struct Telemetry {
  int64_t tokens = 0;
  // [layer][expert]: how many tokens selected that expert.
  std::vector<std::vector<int64_t>> expert_counts;
  // Weight bytes read: dense parts once per call, each selected expert once per call.
  int64_t weight_bytes_read = 0;
  // Parameters touched per token, summed over tokens (divide by tokens for the mean).
  int64_t active_params = 0;
  double router_entropy_sum = 0;  // nats, summed over tokens and layers
  // Routing policies at work, over tokens and layers: choices a capacity moved to a later expert
  // or left out, and weights load-aware re-weighting scaled down.
  int64_t rerouted_choices = 0;
  int64_t dropped_choices = 0;
  int64_t reweighted_choices = 0;
  // What the tokens' computation cost, summed over them (SequenceCost's measures).
  int64_t active_weight_bytes = 0;
  int64_t multiply_adds = 0;
  // Expert parallelism: the bytes of expert outputs this rank sent to and received from the
  // others, and the time its exchanges took (waiting for slower ranks included).
  int64_t exchange_bytes = 0;
  double exchange_s = 0;
  StageTimes time;
  // Opt-in, as it grows with every token: [layer][token * k + j], each token's choices in the
  // order tokens were processed (-1 for none), for RoutingTrace and its locality analysis.
  bool record_routing = false;
  std::vector<std::vector<int32_t>> routing_trace;

  // Zeroes everything but record_routing.
  void Reset(int64_t n_layer, int64_t n_expert);
  // Mean router entropy per token and layer (0 before any token).
  double MeanRouterEntropy() const;
  // Routed experts a token ran per layer, over the layers that routed (dense layers do not):
  // the model's top-k, or fewer under a routing policy that drops experts (0 before any token).
  double MeanExpertsPerToken() const;
  void Merge(const Telemetry& other);
};

// How evenly one layer's experts were chosen, from their counts (tokens that chose each).
struct ExpertUtilisation {
  double choices = 0;         // the counts' sum
  double share_stddev = 0;    // standard deviation of the experts' shares of the choices
  double jain_fairness = 0;   // (sum x)^2 / (n sum x^2): 1 all alike, 1/n one takes all, 0 none
};
ExpertUtilisation UtilisationOf(absl::Span<const int64_t> counts);

}  // namespace moe
