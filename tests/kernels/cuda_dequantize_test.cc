// The CUDA dequantization kernel against the CPU backend, bit for bit, on every quantized block
// type (label gpu). Without a CUDA device it skips and says why: the machines here, CI included,
// have none, so this has only been compiled there (docs/cuda.md).
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dequantize.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/dtype.h"

namespace moe {
namespace {

TEST(CudaDequantizeTest, EveryBlockTypeIsTheCpusBitForBit) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t rows = 37, cols = 768;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kMXFP4, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const size_t row_bytes = RowBytes(t, cols);
    std::vector<uint8_t> m(rows * row_bytes);
    std::vector<float> x(cols), want(rows * cols), got(rows * cols, -1.f);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : x) v = nd(rng);
      ASSERT_TRUE(QuantizeRow(t, x.data(), m.data() + r * row_bytes, cols).ok());
      DequantizeRow(t, m.data() + r * row_bytes, want.data() + r * cols, cols);
    }
    const std::string err =
        cuda::DequantizeRowsFromHost(t, m.data(), m.size(), got.data(), rows, cols);
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  }
  EXPECT_FALSE(cuda::DequantizeRowsFromHost(DType::kF32, nullptr, 0, nullptr, 1, 32).empty());
}

}  // namespace
}  // namespace moe
