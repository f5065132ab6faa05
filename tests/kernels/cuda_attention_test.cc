// The CUDA KV cache store and attention kernel against the CPU backend's (label gpu): the store
// byte for byte; the attention: F32, F16 and Q8_0
// caches, contiguous and paged, grouped-query heads, sliding windows and sinks, one token
// (decode) and several (a prompt), contexts of one to several chunks. Its online softmax sums in
// another order and the device's expf is within 2 ulp of the host's, so values agree within
// 2e-5 (device_decomposition_test runs the same algorithm on the CPU). Without a CUDA device it
// skips and says why: compiled here, never run (docs/cuda.md).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/dequantize.h"
#include "kernels/store_kv.h"
#include "lib/backend/backend.h"
#include "lib/base/dtype.h"

namespace moe {
namespace {

TEST(CudaAttentionTest, MatchesTheCpuBackendOnEveryCacheLayout) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(12);
  std::normal_distribution<float> nd;
  auto cpu = CreateCpuBackend(2);
  for (int trial = 0; trial < 36; ++trial) {
    SCOPED_TRACE(trial);
    const DType types[] = {DType::kF32, DType::kF16, DType::kQ8_0};
    const DType t = types[trial % 3];
    const int64_t hd = 64 << (rng() % 3), n_kv = 1 + rng() % 4, group = 1 + rng() % 8;
    const int64_t n_heads = n_kv * group, n = trial % 2 ? 1 : 1 + rng() % 16;
    const int64_t ctx = trial % 4 < 2 ? rng() % 200 : 1000 + rng() % 3000;
    const bool paged = rng() % 2;
    const int64_t row_bytes = static_cast<int64_t>(RowBytes(t, n_kv * hd));
    const int64_t total = ctx + n, n_blocks = (total + 31) / 32;
    std::vector<int32_t> blocks(n_blocks);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<uint8_t> k(n_blocks * 32 * row_bytes), v(k.size());
    KvLayerView kv{t, k.data(), v.data(), n_kv, hd, {}};
    if (paged) kv.paging = KvPaging{blocks.data(), 5, 32 * row_bytes};
    std::vector<float> kf(total * n_kv * hd), vf(kf.size());
    for (float& x : kf) x = nd(rng);
    for (float& x : vf) x = nd(rng);
    std::vector<int32_t> all(total);
    std::iota(all.begin(), all.end(), 0);
    cpu->StoreKv(kf.data(), vf.data(), total, all.data(), kv);
    std::vector<float> q(n * n_heads * hd), sinks(n_heads);
    for (float& x : q) x = nd(rng);
    for (float& x : sinks) x = nd(rng);
    AttentionOptions options;
    options.window = rng() % 3 == 0 ? 1 + rng() % 256 : 0;
    options.chunked = options.window > 0 && rng() % 2;
    options.sinks = rng() % 2 ? sinks.data() : nullptr;
    std::vector<int32_t> positions(all.begin() + ctx, all.end());
    std::vector<float> want(q.size()), got(q.size(), NAN);
    cpu->Attention(q.data(), n, n_heads, positions.data(), kv, want.data(), options);
    cuda::DeviceKv dkv{t, k.data(), v.data(), n_kv, hd, kv.paging};
    const std::string err = cuda::AttentionFromHost(q.data(), n, n_heads, positions.data(), dkv,
                                                    k.size(), v.size(), n_blocks, got.data(), 0.f,
                                                    options.window, options.chunked, options.sinks);
    ASSERT_TRUE(err.empty()) << err;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-5f * std::max(1.f, std::fabs(want[i]))) << i;
    }
  }
}

TEST(CudaAttentionTest, StoreKvWritesTheCpusCacheBytes) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(13);
  std::normal_distribution<float> nd;
  auto cpu = CreateCpuBackend(1);
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    for (bool paged : {false, true}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + (paged ? " paged" : ""));
      const int64_t n_kv = 4, hd = 64, n = 37, n_blocks = 4;
      const int64_t row_bytes = static_cast<int64_t>(RowBytes(t, n_kv * hd));
      std::vector<int32_t> blocks = {2, 0, 3, 1};
      std::vector<uint8_t> want_k(n_blocks * 16 * row_bytes), want_v(want_k.size());
      std::vector<uint8_t> got_k(want_k.size()), got_v(want_k.size());
      KvPaging paging;
      if (paged) paging = KvPaging{blocks.data(), 4, 16 * row_bytes};
      std::vector<float> k(n * n_kv * hd), v(k.size());
      for (float& x : k) x = 3 * nd(rng);
      for (float& x : v) x = 3 * nd(rng);
      std::vector<int32_t> positions(n);
      std::iota(positions.begin(), positions.end(), 20);  // a later step's rows
      cpu->StoreKv(k.data(), v.data(), n, positions.data(),
                   KvLayerView{t, want_k.data(), want_v.data(), n_kv, hd, paging});
      const std::string err =
          cuda::StoreKvFromHost(k.data(), v.data(), n, positions.data(),
                                cuda::DeviceKv{t, got_k.data(), got_v.data(), n_kv, hd, paging},
                                got_k.size(), got_v.size(), n_blocks);
      ASSERT_TRUE(err.empty()) << err;
      EXPECT_EQ(got_k, want_k);
      EXPECT_EQ(got_v, want_v);
    }
  }
}

TEST(CudaAttentionTest, BadShapesAreErrorsNotLaunches) {
  float q[64] = {}, out[64];
  int32_t pos[1] = {0};
  uint8_t cache[256] = {};
  cuda::DeviceKv kv{DType::kF16, cache, cache, 3, 16, {}};
  EXPECT_FALSE(  // 4 query heads over 3 KV heads
      cuda::AttentionFromHost(q, 1, 4, pos, kv, 256, 256, 0, out, 0.f, 0, false, nullptr).empty());
  kv.n_kv_heads = 1;
  kv.dtype = DType::kQ8_0;  // heads of 16 are not whole blocks
  EXPECT_FALSE(
      cuda::AttentionFromHost(q, 1, 1, pos, kv, 256, 256, 0, out, 0.f, 0, false, nullptr).empty());
  kv.dtype = DType::kQ4_0;
  EXPECT_FALSE(
      cuda::AttentionFromHost(q, 1, 1, pos, kv, 256, 256, 0, out, 0.f, 0, false, nullptr).empty());
  EXPECT_FALSE(cuda::StoreKvFromHost(q, q, 1, pos, kv, 256, 256, 0).empty());
}

}  // namespace
}  // namespace moe
