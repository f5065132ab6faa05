// Which routed experts a GPU holds when not all fit (issue 21's hybrid split): the weights are
// uploaded in order until the device budget is spent, so the order is the placement. With a
// routing profile (moe-cli profile; LoadOptions::expert_warmup_path) the experts that take the
// most tokens go first — hot experts in fast memory, cold ones on the CPU.
#pragma once

#include <vector>

#include "lib/backend/cuda_backend.h"
#include "lib/moe/routing_profile.h"

namespace moe {

// Reorders `tensors`: every non-expert tensor first (in its order), then the routed experts'
// matrices by their expert's place in profile.HottestFirst(), the experts the profile never saw
// after those, in their given order. An expert's matrices stay together.
void OrderExpertsForDevice(const RoutingProfile& profile, std::vector<HostTensor>* tensors);

}  // namespace moe
