// The CUDA RMSNorm, RoPE and gated activations against the CPU backend on random inputs of many
// shapes (label gpu): RMSNorm bit for bit (its lanes are the CPU's, device_decomposition_test),
// RoPE and the activations within what the device's cosf/sinf/expf (2 ulp) allow. Without a
// CUDA device they skip and say why: compiled here, never run (docs/cuda.md).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dequantize.h"
#include "kernels/gated_activation.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "lib/backend/backend.h"
#include "lib/backend/cpu/silu_mul.h"

namespace moe {
namespace {

#define MOE_SKIP_WITHOUT_GPU()                                                         \
  do {                                                                                 \
    std::string why;                                                                   \
    if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why; \
  } while (0)

TEST(CudaElementwiseOpsTest, RmsNormIsTheCpusBitForBit) {
  MOE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  auto cpu = CreateCpuBackend(1);
  for (int64_t dim : {1, 9, 64, 1000, 2880, 4096, 7168}) {
    SCOPED_TRACE(dim);
    const int64_t n = 5;
    std::vector<float> x(n * dim), w(dim), want(n * dim), got(n * dim, NAN);
    for (float& v : x) v = 3 * nd(rng);
    for (float& v : w) v = nd(rng);
    cpu->RmsNorm(x.data(), w.data(), n, dim, 1e-5f, want.data());
    const std::string err = cuda::RmsNormFromHost(x.data(), w.data(), n, dim, 1e-5f, got.data());
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_EQ(got, want);
  }
}

TEST(CudaElementwiseOpsTest, RopeIsTheCpusInBothLayoutsWithYarnAndFrequencyFactors) {
  MOE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  auto cpu = CreateCpuBackend(1);
  for (int trial = 0; trial < 64; ++trial) {
    SCOPED_TRACE(trial);
    RopeParams rope;
    rope.layout = trial % 2 ? RopeLayout::kNorm : RopeLayout::kNeox;
    const int64_t head_dim = 32 << (rng() % 3), n_heads = 1 + rng() % 8, n = 1 + rng() % 9;
    rope.n_rot = rng() % 2 ? head_dim : head_dim / 2;
    rope.offset = rng() % 2 ? head_dim - rope.n_rot : 0;
    rope.freq_base = 10000.f * static_cast<float>(1 + rng() % 100);
    if (trial % 4 >= 2) {
      rope.yarn_factor = static_cast<float>(2 + rng() % 62);
      rope.yarn_orig_ctx = 4096;
      rope.magnitude = 1.f + 0.1f * std::log(rope.yarn_factor);
    }
    std::vector<float> factors(rope.n_rot / 2);
    if (trial % 8 >= 4) {  // Llama 3's per-pair frequency divisors
      for (float& f : factors) f = 1.f + static_cast<float>(rng() % 700) / 100.f;
      rope.freq_factors = factors.data();
    }
    std::vector<float> want(n * n_heads * head_dim);
    for (float& v : want) v = nd(rng);
    std::vector<float> got = want;
    std::vector<int32_t> positions(n);
    for (int32_t& p : positions) p = static_cast<int32_t>(rng() % 32768);
    cpu->Rope(want.data(), n, n_heads, head_dim, positions.data(), rope);
    const std::string err =
        cuda::RopeFromHost(got.data(), n, n_heads, head_dim, positions.data(), rope);
    ASSERT_TRUE(err.empty()) << err;
    for (size_t i = 0; i < got.size(); ++i) {
      // cosf/sinf of angles up to ~3e4 radians: a few ulp of the angle's reduction.
      EXPECT_NEAR(got[i], want[i], 1e-5f * std::max(1.f, std::fabs(want[i]))) << i;
    }
  }
}

TEST(CudaElementwiseOpsTest, GatedActivationsAreTheCpus) {
  MOE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int64_t n = 100003;
  std::vector<float> gate(n), up(n), want(n), got(n, NAN);
  for (float& v : gate) v = 6 * nd(rng);
  for (float& v : up) v = 6 * nd(rng);
  for (auto kind :
       {cuda::GatedActivationKind::kSiluMul, cuda::GatedActivationKind::kSwigluClamped}) {
    if (kind == cuda::GatedActivationKind::kSiluMul) {
      kernels::SiluMulPortable(gate.data(), up.data(), want.data(), n);
    } else {
      kernels::SwigluClampedPortable(gate.data(), up.data(), want.data(), n);
    }
    const std::string err =
        cuda::GatedActivationFromHost(kind, gate.data(), up.data(), got.data(), n);
    ASSERT_TRUE(err.empty()) << err;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6f * std::max(1.f, std::fabs(want[i]))) << i;
    }
  }
}

TEST(CudaElementwiseOpsTest, BadShapesAreErrorsNotLaunches) {
  float x[4] = {}, w[4] = {};
  int32_t pos[1] = {0};
  EXPECT_FALSE(cuda::RmsNormFromHost(x, w, 1, 0, 1e-5f, x).empty());
  RopeParams rope;
  rope.n_rot = 6;  // more than the head holds
  EXPECT_FALSE(cuda::RopeFromHost(x, 1, 1, 4, pos, rope).empty());
  rope.n_rot = 3;  // odd
  EXPECT_FALSE(cuda::RopeFromHost(x, 1, 1, 4, pos, rope).empty());
  EXPECT_FALSE(
      cuda::GatedActivationFromHost(cuda::GatedActivationKind::kSiluMul, x, w, x, -1).empty());
}

}  // namespace
}  // namespace moe
