// The host's token-to-expert lists of one step (expert_dispatch.h), kept between steps so that a
// decode step allocates nothing: what the mixture block and RoutedExpertRunner run experts from.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "lib/moe/expert_dispatch.h"

namespace moe {

class ExpertLists {
 public:
  // experts: n x k choices (-1 = none), every other id in [0, n_expert).
  void Build(const int32_t* experts, int64_t n, int64_t k, int32_t n_expert) {
    offsets_.resize(n_expert + 1);
    tokens_.resize(n * k);
    place_.resize(n * k);
    ListExpertsByCounting(experts, n, k, n_expert, offsets_.data(), tokens_.data(), place_.data());
  }

  // Expert e's tokens, in token order.
  absl::Span<const int32_t> TokensOf(int32_t e) const {
    return {tokens_.data() + offsets_[e], static_cast<size_t>(offsets_[e + 1] - offsets_[e])};
  }
  int64_t CountOf(int32_t e) const { return offsets_[e + 1] - offsets_[e]; }
  // Where choice t * k + j sits in its expert's list (-1: no expert).
  int32_t PlaceOf(int64_t choice) const { return place_[choice]; }

 private:
  std::vector<int64_t> offsets_;
  std::vector<int32_t> tokens_, place_;
};

}  // namespace moe
