// The CUDA backend running whole models (label gpu; skips without a device): every fixture's
// logits on the GPU, and with the routed experts left on the CPU (hybrid), against the CPU
// backend on the same stored blocks — normalised mean squared error within 1e-3 (the device's
// prompt products round activations and weights to F16, the CPU's to 8-bit blocks) and the same
// greedy token wherever the CPU's choice is clear.
#include "lib/backend/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/device_split.h"
#include "lib/runtime/engine.h"
#include "tests/support/device_logits.h"
#include "tests/support/fixture_dirs.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// Device bytes of everything but the routed experts (F16/BF16 matrices are widened to F32).
size_t DenseDeviceBytes(const Engine& engine) {
  size_t bytes = 0;
  for (const TensorSpec& t : engine.model()->spec().tensors) {
    if (t.expert >= 0 || t.shape.size() < 2) continue;
    bytes += WidenedOnDevice(t.dtype) ? static_cast<size_t>(t.num_elements()) * 4 : t.data.size();
  }
  for (const auto& v : engine.model()->vectors()) bytes += v.size() * sizeof(float);
  return bytes;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, int64_t n_vocab) {
  ASSERT_EQ(got.size(), want.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    norm += want[i] * static_cast<double>(want[i]);
  }
  EXPECT_LT(err / std::max(norm, 1e-30), 1e-3);
  for (size_t r = 0; r < want.size() / n_vocab; ++r) {
    const float* w = want.data() + r * n_vocab;
    const float* g = got.data() + r * n_vocab;
    std::vector<float> sorted(w, w + n_vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] < 1e-2f * std::max(1.f, std::fabs(sorted[0]))) continue;
    EXPECT_EQ(std::max_element(g, g + n_vocab) - g, std::max_element(w, w + n_vocab) - w)
        << "row " << r;
  }
}

class CudaBackendTest : public ::testing::TestWithParam<fs::path> {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  }
};

TEST_P(CudaBackendTest, LogitsMatchTheCpuBackend) {
  LoadOptions cpu_options;
  cpu_options.repack = false;  // the blocks as stored, as the device reads them
  auto cpu = Engine::Load(testing::FixtureGguf(GetParam()), cpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  LoadOptions o;
  o.device = ComputeDevice::kCuda;
  auto gpu = Engine::Load(testing::FixtureGguf(GetParam()), o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_NE((*gpu)->device_weights(), nullptr);
  EXPECT_EQ((*gpu)->device_weights()->info().expert_matrices_on_host, 0);
  auto want = testing::EngineLogits(**cpu);
  auto got = testing::EngineLogits(**gpu);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, *want, (*cpu)->model()->hp().n_vocab);
}

// A device budget that holds the other weights and almost none of the experts: the experts run
// on the CPU, on their rows copied over, with the same results.
TEST_P(CudaBackendTest, ExpertsLeftOnTheCpuGiveTheSameLogits) {
  LoadOptions cpu_options;
  cpu_options.repack = false;
  auto cpu = Engine::Load(testing::FixtureGguf(GetParam()), cpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  LoadOptions o;
  o.device = ComputeDevice::kCuda;
  o.device_memory_bytes = DenseDeviceBytes(**cpu) + 4096;
  auto hybrid = Engine::Load(testing::FixtureGguf(GetParam()), o);
  ASSERT_TRUE(hybrid.ok()) << hybrid.status();
  EXPECT_GT((*hybrid)->device_weights()->info().expert_matrices_on_host, 0);
  auto want = testing::EngineLogits(**cpu);
  auto got = testing::EngineLogits(**hybrid);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, *want, (*cpu)->model()->hp().n_vocab);
}

// Weights that do not fit even without the experts: a clear error at load, not a crash later.
TEST_P(CudaBackendTest, ABudgetBelowTheOtherWeightsIsAnError) {
  LoadOptions o;
  o.device = ComputeDevice::kCuda;
  o.device_memory_bytes = 1024;
  auto engine = Engine::Load(testing::FixtureGguf(GetParam()), o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kResourceExhausted) << engine.status();
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, CudaBackendTest, ::testing::ValuesIn(testing::FixtureDirs()),
                         testing::FixtureTestName);

}  // namespace
}  // namespace moe
