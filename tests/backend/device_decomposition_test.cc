// The CUDA kernels split an operation over threads differently from the CPU backend (RMSNorm's
// eight lanes in eight threads, RoPE one thread per token, head and pair with each pair's
// frequency computed again, the weighted combine one thread per value). Run on the CPU, those
// decompositions of the shared cores (norm_core.h, rope_core.h, combine_core.h) must give the CPU
// backend's results bit for bit: what the GPU adds on top is only its own libm (cosf/sinf), checked
// by the gpu-labelled tests where a GPU is.
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/backend/combine_core.h"
#include "lib/backend/norm_core.h"
#include "lib/backend/rope_core.h"

namespace moe {
namespace {

// bit for bit, NaN included
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DeviceDecompositionTest, RmsNormInEightLanesIsTheCpuBackends) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  auto backend = CreateCpuBackend(2);
  for (int64_t dim : {1, 7, 8, 9, 64, 100, 1024, 2880, 4099}) {
    SCOPED_TRACE(dim);
    const int64_t n = 3;
    std::vector<float> x(n * dim), w(dim), want(n * dim), got(n * dim);
    for (float& v : x) v = 4 * nd(rng);
    for (float& v : w) v = nd(rng);
    backend->RmsNorm(x.data(), w.data(), n, dim, 1e-6f, want.data());
    for (int64_t t = 0; t < n; ++t) {  // as rms_norm.cu: one block per row
      const float* xr = x.data() + t * dim;
      double part[kRmsNormLanes];
      for (int j = 0; j < kRmsNormLanes; ++j) part[j] = RmsNormLaneSum(xr, dim, j);
      const float inverse = RmsNormInverse(part, xr, dim, 1e-6f);
      for (int64_t i = 0; i < dim; ++i) got[t * dim + i] = RmsNormElement(xr[i], inverse, w[i]);
    }
    EXPECT_TRUE(SameBits(got, want));
  }
}

TEST(DeviceDecompositionTest, RopeOneThreadPerPairIsTheCpuBackends) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  auto backend = CreateCpuBackend(2);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE(trial);
    RopeParams rope;
    rope.layout = rng() % 2 ? RopeLayout::kNorm : RopeLayout::kNeox;
    const int64_t head_dim = 16 << (rng() % 4), n_heads = 1 + rng() % 4, n = 1 + rng() % 5;
    rope.n_rot = rng() % 2 ? head_dim : head_dim / 2;  // partial rotation (glm4moe) too
    rope.offset = rng() % 2 ? head_dim - rope.n_rot : 0;
    rope.freq_base = 10000.f * static_cast<float>(1 + rng() % 100);
    if (rng() % 2) {  // YaRN
      rope.yarn_factor = static_cast<float>(1 + rng() % 64);
      rope.yarn_orig_ctx = 512 << (rng() % 6);
      rope.magnitude = 1.f + 0.1f * std::log(rope.yarn_factor);
    }
    std::vector<float> want(n * n_heads * head_dim);
    for (float& v : want) v = nd(rng);
    std::vector<float> got = want;
    std::vector<int32_t> positions(n);
    for (int32_t& p : positions) p = static_cast<int32_t>(rng() % 200000);
    backend->Rope(want.data(), n, n_heads, head_dim, positions.data(), rope);
    const int64_t half = rope.n_rot / 2;
    const RopeCorrection corr = RopeCorrectionOf(rope);
    for (int64_t id = 0; id < n * n_heads * half; ++id) {  // as rope.cu's threads
      const int64_t i = id % half, row = id / half, t = row / n_heads;
      const float theta =
          RopeAngle(rope, positions[t], RopePairFrequency(rope, i), RopePairRamp(rope, corr, i));
      int64_t a, b;
      RopePairIndex(rope, i, &a, &b);
      RopeRotate(got.data() + row * head_dim + rope.offset, a, b, std::cos(theta) * rope.magnitude,
                 std::sin(theta) * rope.magnitude);
    }
    EXPECT_TRUE(SameBits(got, want));
  }
}

TEST(DeviceDecompositionTest, CombineOneValuePerThreadIsTheCpuBackends) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  auto backend = CreateCpuBackend(2);
  for (int64_t dim : {1, 255, 256, 257, 2880}) {
    SCOPED_TRACE(dim);
    const int64_t n = 4, k = 6;
    std::vector<std::vector<float>> rows(n * k, std::vector<float>(dim));
    std::vector<const float*> src(n * k);
    std::vector<float> w(n * k);
    for (int64_t s = 0; s < n * k; ++s) {
      for (float& v : rows[s]) v = nd(rng);
      src[s] = s % 5 == 3 ? nullptr : rows[s].data();  // a choice that ran nowhere
      w[s] = nd(rng);
    }
    std::vector<float> want(n * dim);
    for (float& v : want) v = nd(rng);
    std::vector<float> got = want;
    backend->AddWeightedRows(n, k, dim, src.data(), w.data(), want.data());
    for (int64_t index = 0; index < n * dim; ++index) {  // as combine.cu's threads
      const int64_t t = index / dim, i = index % dim;
      got[index] += WeightedSumAt(src.data() + t * k, w.data() + t * k, k, i);
    }
    EXPECT_TRUE(SameBits(got, want));
  }
}

}  // namespace
}  // namespace moe
