// The order weights take the GPU in when not all fit: everything but the routed experts first,
// then the experts a routing profile saw most, an expert's matrices together, the unprofiled
// ones last in their own order.
#include "lib/runtime/device_placement.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

HostTensor Dense(int id) {
  HostTensor t;
  t.bytes = static_cast<size_t>(id);  // the test's name for it
  return t;
}

HostTensor Expert(int layer, int expert, int matrix) {
  HostTensor t;
  t.routed_expert = true;
  t.layer = layer;
  t.expert = expert;
  t.bytes = static_cast<size_t>(100 * layer + 10 * expert + matrix);
  return t;
}

std::vector<size_t> Names(const std::vector<HostTensor>& ts) {
  std::vector<size_t> names;
  for (const HostTensor& t : ts) names.push_back(t.bytes);
  return names;
}

TEST(DevicePlacementTest, HottestExpertsFirstAfterTheDenseWeights) {
  // Two layers of three experts, three matrices each, with dense tensors between them.
  std::vector<HostTensor> ts = {Dense(1001)};
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 3; ++e) {
      for (int m = 0; m < 3; ++m) ts.push_back(Expert(l, e, m));
    }
    ts.push_back(Dense(1002 + l));
  }
  RoutingProfile profile;
  // Layer 1 expert 2 the hottest, then layer 0 expert 1; layer 0 expert 0 and layer 1 expert 0
  // never chosen; layer 0 expert 2 and layer 1 expert 1 tie (lower layer first).
  profile.counts = {{0, 50, 7}, {0, 7, 90}};
  OrderExpertsForDevice(profile, &ts);
  const std::vector<size_t> want = {1001, 1002, 1003,                  // dense, in order
                                    120,  121,  122,  10,  11,  12,    // 90, then 50
                                    20,   21,   22,   110, 111, 112,   // the tie: layer 0 first
                                    0,    1,    2,    100, 101, 102};  // unseen, in model order
  EXPECT_EQ(Names(ts), want);
}

TEST(DevicePlacementTest, AnEmptyProfileKeepsTheModelOrder) {
  std::vector<HostTensor> ts = {Expert(0, 1, 0), Dense(1007), Expert(0, 0, 0)};
  RoutingProfile profile;
  profile.counts = {{0, 0}};
  OrderExpertsForDevice(profile, &ts);
  EXPECT_EQ(Names(ts), (std::vector<size_t>{1007, 10, 0}));
}

}  // namespace
}  // namespace moe
