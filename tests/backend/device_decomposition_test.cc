// The CUDA kernels split an operation over threads differently from the CPU backend (RMSNorm's
// eight lanes in eight threads, RoPE one thread per token, head and pair with each pair's
// frequency computed again, the weighted combine one thread per value, attention an online softmax
// over chunks of positions reading one cached value at a time). Run on the CPU, those
// decompositions of the shared cores (norm_core.h, rope_core.h, combine_core.h, kv_core.h) must
// give the CPU backend's results bit for bit: what the GPU adds on top is only its own libm
// (cosf/sinf), checked by the gpu-labelled tests where a GPU is.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/backend/combine_core.h"
#include "lib/backend/cpu/q8_activations.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/backend/kv_core.h"
#include "lib/backend/norm_core.h"
#include "lib/backend/rope_core.h"
#include "lib/backend/routed_matvec_core.h"
#include "lib/base/dtype.h"

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

// The routed-expert kernel (routed_experts.cu) splits each choice's row over RoutedLanes lanes,
// lane l taking blocks l, l + lanes, ..., and adds the lanes' parts by xor shuffles. Run that
// way on the CPU, each row equals the CPU backend's product of the same matrix and input to
// within float rounding of the order of the sum (the same 8-bit activations, the same block
// arithmetic), for F32 rows, 32-value block types and a K-quant.
TEST(DeviceDecompositionTest, RoutedRowsByLanesAreTheCpuBackendsProducts) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  auto backend = CreateCpuBackend({1, true});
  for (int64_t cols : {256, 512, 2880}) {
    for (DType t :
         {DType::kF32, DType::kQ8_0, DType::kQ4_0, DType::kMXFP4, DType::kQ4_K, DType::kQ6_K}) {
      const BlockShape shape = QuantBlockShape(t);
      if (shape.elems > 0 && cols % shape.elems != 0) continue;
      SCOPED_TRACE(testing::Message() << DTypeName(t) << " x " << cols);
      const int64_t rows = 8;
      std::vector<float> w(rows * cols), x(cols), bias(rows);
      for (float& v : w) v = nd(rng);
      for (float& v : x) v = nd(rng);
      for (float& v : bias) v = nd(rng);
      std::vector<uint8_t> data(RowBytes(t, cols) * rows);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(
            QuantizeRow(t, w.data() + r * cols, data.data() + r * RowBytes(t, cols), cols).ok());
      }
      std::vector<Q8Block> x1(cols / 32), x8(cols / 32);
      QuantizeActivations(x.data(), cols, x1.data());
      if (cols % 256 == 0) {
        QuantizeActivations(x.data(), cols, x8.data(), ActivationScales::kPerSuperBlock);
      }
      std::vector<float> want(rows);
      backend->MatMul({t, rows, cols, data.data()}, x.data(), 1, want.data());
      const RoutedMatrix m{data.data(), bias.data(), t};
      const int lanes = RoutedLanes(cols);
      for (int64_t r = 0; r < rows; ++r) {
        float parts[32];
        float magnitude = 0.f;
        for (int l = 0; l < lanes; ++l) {
          parts[l] = RoutedRowPart(m, r, cols, x.data(), x1.data(), x8.data(), l, lanes);
          magnitude += std::fabs(parts[l]);
        }
        const float got = ShuffleSum(parts, lanes) + bias[r];
        EXPECT_NEAR(got, want[r] + bias[r], 1e-5f * (magnitude + 1.f)) << "row " << r;
      }
    }
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

TEST(DeviceDecompositionTest, CachedValuesOneAtATimeAreTheDecodedRows) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    SCOPED_TRACE(DTypeName(t));
    const int64_t n = 256;
    EXPECT_EQ(KvValuesBytes(t, n), static_cast<int64_t>(RowBytes(t, n)));
    std::vector<float> x(n), want(n), got(n);
    for (float& v : x) v = 5 * nd(rng);
    std::vector<uint8_t> row(RowBytes(t, n));
    ASSERT_TRUE(QuantizeRow(t, x.data(), row.data(), n).ok());
    DequantizeRow(t, row.data(), want.data(), n);
    for (int64_t i = 0; i < n; ++i) got[i] = KvValueAt(t, row.data(), i);
    EXPECT_TRUE(SameBits(got, want));
  }
}

// attention.cu's algorithm for one (token, head), its parallel steps done one after another:
// chunks of 128 positions, each chunk's maximum and exponentials updating a running maximum and
// sum, the sink starting them.
void OnlineSoftmaxAttention(const float* q, int64_t h, int64_t n_heads, int32_t position,
                            const KvLayerView& kv, float scale, int64_t window, bool chunked,
                            const float* sinks, float* out) {
  constexpr int64_t kChunk = 128;
  const int64_t hd = kv.head_dim, kvh = h / (n_heads / kv.n_kv_heads);
  const int64_t head_bytes = KvValuesBytes(kv.dtype, hd);
  const int64_t row_bytes = kv.paging.HeadRowBytes(head_bytes, kv.n_kv_heads);
  const int64_t head_offset = kv.paging.HeadStart(kvh, head_bytes);
  const KvSpan span = AttendedSpan(position, window, chunked);
  float m = sinks != nullptr ? sinks[h] : -INFINITY, l = sinks != nullptr ? 1.f : 0.f;
  std::vector<float> acc(hd, 0.f), e(kChunk);
  for (int64_t c0 = span.first; c0 < span.end; c0 += kChunk) {
    const int64_t chunk = std::min(kChunk, span.end - c0);
    float chunk_max = -INFINITY;
    for (int64_t j = 0; j < chunk; ++j) {
      const uint8_t* krow = kv.k + kv.paging.RowOffset(c0 + j, row_bytes) + head_offset;
      float dot = 0.f;
      for (int64_t i = 0; i < hd; ++i) dot += q[i] * KvValueAt(kv.dtype, krow, i);
      e[j] = dot * scale;
      chunk_max = std::max(chunk_max, e[j]);
    }
    const float new_m = std::max(m, chunk_max);
    float chunk_sum = 0.f;
    for (int64_t j = 0; j < chunk; ++j) chunk_sum += e[j] = std::exp(e[j] - new_m);
    const float correction = std::exp(m - new_m);
    l = l * correction + chunk_sum;
    for (int64_t i = 0; i < hd; ++i) {
      float a = acc[i] * correction;
      for (int64_t j = 0; j < chunk; ++j) {
        const uint8_t* vrow = kv.v + kv.paging.RowOffset(c0 + j, row_bytes) + head_offset;
        a += e[j] * KvValueAt(kv.dtype, vrow, i);
      }
      acc[i] = a;
    }
    m = new_m;
  }
  for (int64_t i = 0; i < hd; ++i) out[i] = acc[i] / l;
}

TEST(DeviceDecompositionTest, OnlineSoftmaxAttentionIsTheCpuBackends) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  auto backend = CreateCpuBackend(2);
  for (int trial = 0; trial < 48; ++trial) {
    SCOPED_TRACE(trial);
    const DType types[] = {DType::kF32, DType::kF16, DType::kQ8_0};
    const DType t = types[trial % 3];
    const int64_t hd = 32 << (rng() % 3), n_kv = 1 + rng() % 3, group = 1 + rng() % 4;
    const int64_t n_heads = n_kv * group, ctx = 1 + rng() % 400, n = 1 + rng() % 6;
    const bool paged = rng() % 2;
    const int block_shift = 4;
    const int64_t row_bytes = static_cast<int64_t>(RowBytes(t, n_kv * hd));
    const int64_t n_blocks = (ctx + n + 15) / 16;
    std::vector<int32_t> blocks(n_blocks);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<uint8_t> k(n_blocks * 16 * row_bytes), v(k.size());
    KvLayerView kv{t, k.data(), v.data(), n_kv, hd, {}};
    if (paged) kv.paging = KvPaging{blocks.data(), block_shift, 16 * row_bytes};
    // Each KV head's rows apart, as the caches keep them (in each block, or in the whole cache).
    if (rng() % 2) {
      const int64_t head_bytes = KvValuesBytes(t, hd);
      kv.paging.head_stride = (paged ? 16 : n_blocks * 16) * head_bytes;
    }
    // The cache holds ctx earlier positions and the n new ones, stored as the forward pass does.
    const int64_t total = ctx + n;
    std::vector<float> kf(total * n_kv * hd), vf(kf.size());
    for (float& x : kf) x = nd(rng);
    for (float& x : vf) x = nd(rng);
    std::vector<int32_t> all(total);
    std::iota(all.begin(), all.end(), 0);
    backend->StoreKv(kf.data(), vf.data(), total, all.data(), kv);
    std::vector<float> q(n * n_heads * hd), sinks(n_heads);
    for (float& x : q) x = nd(rng);
    for (float& x : sinks) x = nd(rng);
    AttentionOptions options;
    options.window = rng() % 3 == 0 ? 1 + rng() % 64 : 0;
    options.chunked = options.window > 0 && rng() % 2;
    options.sinks = rng() % 2 ? sinks.data() : nullptr;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<int32_t> positions(all.begin() + ctx, all.end());
    std::vector<float> want(q.size()), got(q.size());
    backend->Attention(q.data(), n, n_heads, positions.data(), kv, want.data(), options);
    for (int64_t tok = 0; tok < n; ++tok) {
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t at = (tok * n_heads + h) * hd;
        OnlineSoftmaxAttention(q.data() + at, h, n_heads, positions[tok], kv, scale, options.window,
                               options.chunked, options.sinks, got.data() + at);
      }
    }
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-5f * std::max(1.f, std::fabs(want[i]))) << i;
    }
  }
}

}  // namespace
}  // namespace moe
