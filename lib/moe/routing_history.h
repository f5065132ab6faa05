// Load-aware re-weighting: a sequence's routing history, and the weights it scales. An expert
// that took more than its share of a layer's recent choices (RoutingPolicy::load_window tokens
// before this one, load_limit x the fair share 1 / n_expert) has its weight scaled down by the
// excess; the token's other chosen experts make up the difference, so its weights keep their
// sum. The choices themselves never change, only how much each counts.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/moe/router.h"

namespace moe {

class RoutingHistory {
 public:
  // Scales the weights of the k experts the token at `position` chose in `layer` by their load
  // over the policy's window of positions before it (as recorded). Returns how many weights were
  // scaled down. Nothing happens when the window is 0 or holds no choice yet.
  int Reweight(const RoutingPolicy& policy, int n_expert, int layer, int64_t position,
               const int32_t* experts, float* weights, int k) const;
  // Keeps the token's choices (-1: none), replacing what an earlier pass at that position kept;
  // positions in the window are read, so a truncated and regrown sequence sees its own past.
  void Record(int layer, int64_t position, const int32_t* experts, int k);
  void Clear() { choices_.clear(); }

 private:
  // [layer][position * k + j], -1 where a position has not been recorded.
  std::vector<std::vector<int32_t>> choices_;
  int k_ = 0;
};

}  // namespace moe
