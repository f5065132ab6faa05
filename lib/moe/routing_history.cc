#include "lib/moe/routing_history.h"

#include <algorithm>

namespace moe {

int RoutingHistory::Reweight(const RoutingPolicy& policy, int n_expert, int layer, int64_t position,
                             const int32_t* experts, float* weights, int k) const {
  if (policy.load_window <= 0 || layer >= static_cast<int>(choices_.size()) || k_ == 0) return 0;
  const std::vector<int32_t>& past = choices_[layer];
  const int64_t end = std::min<int64_t>(position, static_cast<int64_t>(past.size()) / k_);
  const int64_t begin = std::max<int64_t>(0, position - policy.load_window);
  int64_t total = 0;
  for (int64_t i = begin * k_; i < end * k_; ++i) total += past[i] >= 0;
  if (total == 0) return 0;
  const double limit = static_cast<double>(policy.load_limit) / n_expert;
  float before = 0, after = 0;
  int scaled = 0;
  for (int j = 0; j < k; ++j) {
    if (experts[j] < 0) continue;
    before += weights[j];
    int64_t count = 0;
    for (int64_t i = begin * k_; i < end * k_; ++i) count += past[i] == experts[j];
    const double share = static_cast<double>(count) / static_cast<double>(total);
    if (share > limit) {
      weights[j] *= static_cast<float>(limit / share);
      ++scaled;
    }
    after += weights[j];
  }
  if (scaled > 0 && after > 0) {
    const float restore = before / after;
    for (int j = 0; j < k; ++j) weights[j] *= restore;
  }
  return scaled;
}

void RoutingHistory::Record(int layer, int64_t position, const int32_t* experts, int k) {
  if (k_ != k) {
    choices_.clear();
    k_ = k;
  }
  if (layer >= static_cast<int>(choices_.size())) choices_.resize(layer + 1);
  std::vector<int32_t>& past = choices_[layer];
  if (static_cast<int64_t>(past.size()) < (position + 1) * k) past.resize((position + 1) * k, -1);
  std::copy_n(experts, k, past.begin() + position * k);
}

}  // namespace moe
