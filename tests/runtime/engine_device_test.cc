// Choosing where a model runs at load (issue 21), on a machine without a GPU (CI): a CUDA device
// asked for is an error that says why none can be used; kAuto falls back to the CPU, says so,
// and computes what the CPU load computes. With CUDA built, the module libmoe_cuda.so is loaded
// for real ($MOE_CUDA_MODULE, set by CMake) and answers that there is no device. On a machine
// with a GPU these cases skip: cuda_backend_test (label gpu) runs the device there.
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/cuda_backend.h"
#include "lib/runtime/engine.h"
#include "tests/support/device_logits.h"

namespace moe {
namespace {

using ::testing::HasSubstr;

std::string Fixture() {
  return std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf";
}

TEST(EngineDeviceTest, AskingForCudaWithoutADeviceIsAnErrorThatSaysWhy) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a CUDA device is here: cuda_backend_test";
  LoadOptions o;
  o.device = ComputeDevice::kCuda;
  auto engine = Engine::Load(Fixture(), o);
  ASSERT_FALSE(engine.ok());
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("a CUDA device was asked for"));
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("CUDA"));
}

TEST(EngineDeviceTest, AutoRunsOnTheCpuWithoutADeviceAndSaysSo) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a CUDA device is here: cuda_backend_test";
  LoadOptions o;
  o.device = ComputeDevice::kAuto;
  auto automatic = Engine::Load(Fixture(), o);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ((*automatic)->device_weights(), nullptr);
  EXPECT_THAT((*automatic)->device_note(), HasSubstr("cpu ("));
  auto cpu = Engine::Load(Fixture(), LoadOptions{});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->device_note(), "cpu");
  auto want = testing::EngineLogits(**cpu);
  auto got = testing::EngineLogits(**automatic);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(*got, *want);
}

// The module built beside libmoe is found, is of this build, and reports the missing device
// (not a failure to load it).
TEST(EngineDeviceTest, TheCudaModuleLoadsAndFindsNoDevice) {
  if (std::getenv("MOE_CUDA_MODULE") == nullptr) GTEST_SKIP() << "built without CUDA";
  const absl::Status s = CudaDeviceAvailable();
  if (s.ok()) GTEST_SKIP() << "a CUDA device is here: cuda_backend_test";
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no usable CUDA device")) << s;
}

}  // namespace
}  // namespace moe
