// How much an expert cache can gain from a model's routing: the experts each token chose, per
// layer, replayed in the order a decode step reads them (token by token, layer by layer), as
// reuse distances and as the hit rate a least-recently-used cache of any size would reach.
//
// Random-weight models route almost uniformly, so their hit rate at a fraction f of the experts
// is about f; trained routing does better where experts are reused by nearby tokens (temporal
// locality) or some experts are hot (skew). `moe-cli profile` prints this for a text.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

// The experts each token chose: layers[l][t * top_k + j] is token t's j-th choice in layer l, or
// -1 where none was made. Tokens in the order they were processed.
struct RoutingTrace {
  int64_t n_expert = 0;
  int64_t top_k = 0;
  std::vector<std::vector<int32_t>> layers;

  int64_t tokens() const;
};

// Reuse distance in tokens: a choice of expert e in layer l at token t whose previous use in
// that layer was at token t' has distance t - t'. Buckets: 1 (the previous token chose it too),
// 2-4, 5-16, 17-64, over 64.
inline constexpr std::array<int64_t, 4> kReuseBucketUpper = {1, 4, 16, 64};

struct LayerLocality {
  int64_t choices = 0;
  int64_t first_uses = 0;  // the expert's first use in this layer: no distance
  std::array<int64_t, kReuseBucketUpper.size() + 1> reuse_buckets{};
  int64_t median_reuse = 0;  // tokens; 0 when nothing was reused
  double mean_reuse = 0;
};

struct RoutingLocality {
  int64_t tokens = 0;
  int64_t experts = 0;  // n_layer * n_expert: every unit a cache could hold
  std::vector<LayerLocality> layers;
  // Over all layers in decode order: stack_distance[d] counts the choices whose expert was last
  // used with exactly d other experts used since (an LRU cache of more than d experts hits them);
  // cold counts first uses, which every cache misses.
  std::vector<int64_t> stack_distance;
  int64_t cold = 0;
  int64_t choices = 0;
  // [layer][expert]: times chosen, for the static placement's bound below.
  std::vector<std::vector<int64_t>> counts;

  // Hit rate of an LRU cache of `capacity` experts (of any layer) over the trace, cold misses
  // included. Experts the current step uses are pinned in the real cache, which changes nothing
  // here: a step's experts are distinct.
  double LruHitRate(int64_t capacity) const;
  // Hit rate of the best static placement of `capacity` experts: the most chosen ones of the
  // whole trace kept resident, never evicted (an oracle: it knows the counts in advance).
  double StaticHitRate(int64_t capacity) const;
};

absl::StatusOr<RoutingLocality> AnalyzeRoutingLocality(const RoutingTrace& trace);

}  // namespace moe
