#include "lib/moe/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moe {

void Route(const RouterConfig& c, absl::Span<const float> logits, int64_t n_tokens, Routing* out) {
  Routing& r = *out;
  r.experts.resize(n_tokens * c.top_k);
  r.weights.resize(n_tokens * c.top_k);
  r.entropy.resize(n_tokens);
  thread_local std::vector<float> probs;
  thread_local std::vector<int32_t> order;
  probs.resize(c.n_expert);
  order.resize(c.n_expert);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* l = logits.data() + t * c.n_expert;
    float max_l = *std::max_element(l, l + c.n_expert);
    float sum = 0;
    for (int e = 0; e < c.n_expert; ++e) sum += probs[e] = std::exp(l[e] - max_l);
    float entropy = 0;
    for (int e = 0; e < c.n_expert; ++e) {
      probs[e] /= sum;
      if (probs[e] > 0) entropy -= probs[e] * std::log(probs[e]);
    }
    r.entropy[t] = entropy;
    std::iota(order.begin(), order.end(), 0);
    auto allowed_end = order.end();
    if (c.disabled != nullptr && !c.disabled->empty()) {
      // In place and order-keeping without stable_partition's buffer.
      allowed_end =
          std::remove_if(order.begin(), order.end(), [&](int32_t e) { return (*c.disabled)[e]; });
    }
    int k = std::min<int>(c.top_k, static_cast<int>(allowed_end - order.begin()));
    std::partial_sort(order.begin(), order.begin() + k, allowed_end, [&](int32_t a, int32_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    float chosen = 0;
    for (int j = 0; j < k; ++j) chosen += probs[order[j]];
    for (int j = 0; j < c.top_k; ++j) {
      bool valid = j < k;
      r.experts[t * c.top_k + j] = valid ? order[j] : -1;
      float w = valid ? probs[order[j]] : 0.f;
      if (c.renormalize && chosen > 0) w /= chosen;
      r.weights[t * c.top_k + j] = w;
    }
  }
}

Routing Route(const RouterConfig& c, absl::Span<const float> logits, int64_t n_tokens) {
  Routing r;
  Route(c, logits, n_tokens, &r);
  return r;
}

}  // namespace moe
