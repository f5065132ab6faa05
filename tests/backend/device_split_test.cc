// Which weights a GPU holds under a budget (the CUDA backend's hybrid split): every non-expert
// tensor, then whole experts in order while they fit; F16/BF16 counted widened to F32; an error
// when the non-expert weights alone do not fit.
#include "lib/backend/device_split.h"

#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

HostTensor Dense(size_t bytes) {
  HostTensor t;
  t.bytes = bytes;
  t.cols = static_cast<int64_t>(bytes / 4);
  return t;
}

HostTensor ExpertMatrix(int layer, int expert, size_t bytes) {
  HostTensor t = Dense(bytes);
  t.routed_expert = true;
  t.layer = layer;
  t.expert = expert;
  return t;
}

TEST(DeviceSplitTest, DenseFirstThenWholeExpertsInOrderWhileTheyFit) {
  // Two dense tensors (300 bytes), then experts of 3 matrices of 100 bytes, interleaved as a
  // profile's order may leave them: (0,1), (0,0), (1,0).
  std::vector<HostTensor> ts = {Dense(200),
                                ExpertMatrix(0, 1, 100),
                                ExpertMatrix(0, 1, 100),
                                ExpertMatrix(0, 1, 100),
                                Dense(100),
                                ExpertMatrix(0, 0, 100),
                                ExpertMatrix(0, 0, 100),
                                ExpertMatrix(1, 0, 100),
                                ExpertMatrix(0, 0, 100),
                                ExpertMatrix(1, 0, 100),
                                ExpertMatrix(1, 0, 100)};
  // Room for the dense weights, expert (0,1) and two matrices more: expert (0,0) does not fit
  // whole, so none of it goes, and neither does (1,0).
  auto split = SplitForDevice(ts, 300 + 300 + 200);
  ASSERT_TRUE(split.ok()) << split.status();
  const std::vector<bool> want = {true,  true,  true,  true,  true, false,
                                  false, false, false, false, false};
  EXPECT_EQ(split->on_device, want);
  EXPECT_EQ(split->bytes, 600u);
  EXPECT_EQ(split->expert_matrices_on_device, 3);
  EXPECT_EQ(split->expert_matrices_on_host, 6);
  // With room for all, everything.
  split = SplitForDevice(ts, 1200);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->on_device, std::vector<bool>(ts.size(), true));
  EXPECT_EQ(split->expert_matrices_on_host, 0);
}

TEST(DeviceSplitTest, HalfPrecisionCountsWidenedAndDenseOverTheBudgetIsAnError) {
  HostTensor half;
  half.dtype = DType::kF16;
  half.rows = 4;
  half.cols = 8;
  half.bytes = 4 * 8 * 2;
  EXPECT_EQ(DeviceBytes(half), 4u * 8u * 4u);
  const std::vector<HostTensor> ts = {half, ExpertMatrix(0, 0, 64)};
  auto split = SplitForDevice(ts, 127);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), absl::StatusCode::kResourceExhausted);
  split = SplitForDevice(ts, 128);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->on_device, (std::vector<bool>{true, false}));
}

}  // namespace
}  // namespace moe
