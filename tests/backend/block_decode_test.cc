// The numeric core the CPU backend and the CUDA kernels share (lib/backend/block_decode.h): its
// block shapes are GetDTypeInfo's, and decoding a matrix block by block in any order, as the GPU
// threads do (DecodeBlockAt), gives DequantizeRow's floats bit for bit at every SIMD level.
#include "lib/backend/block_decode.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/dtype.h"

namespace moe {
namespace {

constexpr DType kQuantTypes[] = {DType::kQ8_0,  DType::kQ4_0, DType::kMXFP4, DType::kQ4_K,
                                 DType::kQ5_K,  DType::kQ6_K, DType::kQ2_K,  DType::kQ3_K,
                                 DType::kQ4_1,  DType::kQ5_0, DType::kQ5_1,  DType::kIQ4_NL,
                                 DType::kIQ4_XS};

TEST(BlockDecodeTest, BlockShapesAreTheTypeTable) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    const BlockShape s = QuantBlockShape(t);
    bool quant = false;
    for (DType q : kQuantTypes) quant |= q == t;
    SCOPED_TRACE(std::string(DTypeName(t)));
    if (!quant) {
      EXPECT_EQ(s.elems, 0);
      float y[256];
      EXPECT_FALSE(DecodeQuantBlock(t, nullptr, y));
      continue;
    }
    EXPECT_EQ(s.elems, GetDTypeInfo(t).block_elems);
    EXPECT_EQ(s.bytes, GetDTypeInfo(t).block_bytes);
  }
}

TEST(BlockDecodeTest, BlocksInAnyOrderAreDequantizeRowBitForBit) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int64_t rows = 5, cols = 512;
  const SimdLevel native = ActiveSimdLevel();
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const size_t row_bytes = RowBytes(t, cols);
    std::vector<uint8_t> m(rows * row_bytes);
    std::vector<float> x(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : x) v = nd(rng) * (r + 1);
      ASSERT_TRUE(QuantizeRow(t, x.data(), m.data() + r * row_bytes, cols).ok());
    }
    // Blocks in a shuffled order, as threads may run.
    const int64_t blocks = rows * cols / QuantBlockShape(t).elems;
    std::vector<int64_t> order(blocks);
    for (int64_t i = 0; i < blocks; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<float> got(rows * cols, -1.f);
    for (int64_t i : order) ASSERT_TRUE(DecodeBlockAt(t, m.data(), got.data(), cols, i));
    for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
      if (level > DetectedSimdLevel()) continue;
      SetSimdLevelForTesting(level);
      std::vector<float> want(rows * cols);
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(t, m.data() + r * row_bytes, want.data() + r * cols, cols);
      }
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << CpuSimdLevelName(level);
    }
    SetSimdLevelForTesting(native);
    float y[256];
    EXPECT_FALSE(DecodeBlockAt(t, m.data(), y, cols + 1, 0)) << "rows of whole blocks only";
  }
}

}  // namespace
}  // namespace moe
