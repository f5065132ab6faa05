// Which experts to prune, from a routing profile: per layer, the fewest most-chosen experts that
// carry the share `keep` of the layer's traffic stay (at least min_kept of them), the others go.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "lib/moe/expert_cache.h"
#include "lib/moe/routing_profile.h"

namespace moe {

struct PruningPlan {
  std::vector<ExpertKey> pruned;     // layer by layer, expert ids ascending
  std::vector<double> kept_traffic;  // per layer: the kept experts' share of its choices (1: all)
};

// routed[l]: whether layer l has routed experts (a profile counts nothing for the others).
// Layers the profile saw no token choose in keep every expert. An error unless keep is in
// (0, 1] and min_kept >= 1.
absl::StatusOr<PruningPlan> PlanPruning(const RoutingProfile& profile, double keep, int min_kept,
                                        const std::vector<bool>& routed);

}  // namespace moe
