// Backend::RunRoutedExperts from routing in host memory: each expert's tokens listed
// (expert_lists.h), every chosen expert run once over them with the shared expert in the same
// RunExperts call, then one AddWeightedRows — the calls and the order the mixture block's host
// path makes, so the results are its results bit for bit. The CPU backend runs routed experts
// this way; a device backend falls back to it (after one copy of the routing to the host) for
// steps it does not route in place.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "lib/backend/backend.h"
#include "lib/backend/backend_buffer.h"
#include "lib/moe/expert_lists.h"

namespace moe {

class RoutedExpertRunner {
 public:
  // r's ids, weights and shared_gate are read from the host copies given here instead; every
  // other pointer of r is in be's memory. An id out of range or an expert without weights is an
  // error, before anything is queued.
  absl::Status Run(Backend& be, const Backend::RoutedExperts& r, const int32_t* ids,
                   const float* weights, const float* shared_gate, float* x);

 private:
  ExpertLists lists_;
  std::vector<BackendBuffer<float>> outs_;  // by expert id: [its tokens x d]
  std::vector<Backend::ExpertJob> jobs_;
  std::vector<const float*> src_;
  std::vector<float> weight_;
};

}  // namespace moe
