// The run-time row layouts hold exactly the values of the rows they came from, and their
// kernels compute the same products.
#include "lib/backend/cpu/repack.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/quant_rows.h"

namespace moe {
namespace {

TEST(RepackTest, RowsKeepTheirValuesAndProducts) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t cols : {128, 640, 1024, 2048 + 128}) {
      const int64_t rows = 3;
      std::vector<float> w(rows * cols), x(cols);
      for (auto& v : w) v = nd(rng);
      for (auto& v : x) v = 2 * nd(rng);
      const size_t row_bytes = RowBytes(t, cols);
      std::vector<uint8_t> original(rows * row_bytes);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(
            QuantizeRow(t, w.data() + r * cols, original.data() + r * row_bytes, cols).ok());
      }
      const DType rt = RepackedType(t, cols);
      ASSERT_NE(rt, t) << DTypeName(t) << " " << cols;
      ASSERT_EQ(RowBytes(rt, cols), row_bytes);
      std::vector<uint8_t> repacked = original;
      RepackRows(t, repacked.data(), rows, cols);
      EXPECT_NE(repacked, original);
      std::vector<Q8Block> xq(cols / 32);
      QuantizeActivations(x.data(), cols, xq.data());
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> a(cols), b(cols);
        DequantizeRow(t, original.data() + r * row_bytes, a.data(), cols);
        DequantizeRow(rt, repacked.data() + r * row_bytes, b.data(), cols);
        EXPECT_EQ(a, b) << DTypeName(t) << " cols " << cols << " row " << r;
        const float want =
            GetQuantDot(t, SimdLevel::kScalar)(original.data() + r * row_bytes, xq.data(), cols);
        for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
          if (level > DetectedSimdLevel()) continue;
          const float got =
              GetQuantDot(rt, level)(repacked.data() + r * row_bytes, xq.data(), cols);
          EXPECT_NEAR(got, want, 1e-4 * (1 + std::fabs(want)))
              << DTypeName(rt) << " " << CpuSimdLevelName(level) << " cols " << cols;
        }
        if (SplitQuantDotFn split = GetSplitQuantDot(rt, DetectedSimdLevel())) {
          std::vector<float> xd(xq.size()), xsum(xq.size()), xsum16(2 * xq.size());
          FillQ8Aux(xq.data(), static_cast<int64_t>(xq.size()), xd.data(), xsum.data(),
                    xsum16.data());
          const Q8Aux aux{xd.data(), xsum.data(), xsum16.data()};
          const float got = split(repacked.data() + r * row_bytes, xq.data(), aux, cols);
          EXPECT_NEAR(got, want, 1e-4 * (1 + std::fabs(want)))
              << DTypeName(rt) << " split, cols " << cols;
        }
        EXPECT_NEAR(DotRow(rt, repacked.data() + r * row_bytes, x.data(), cols),
                    DotRow(t, original.data() + r * row_bytes, x.data(), cols), 1e-4 * cols);
      }
    }
  }
}

TEST(RepackTest, RowsThatDoNotFitKeepTheirType) {
  EXPECT_EQ(RepackedType(DType::kQ4_0, 96), DType::kQ4_0);  // Q4_0R groups 4 blocks
  EXPECT_EQ(RepackedType(DType::kQ8_0, 96), DType::kQ8_0R);
  EXPECT_EQ(RepackedType(DType::kQ4_K, 256), DType::kQ4_K);
  EXPECT_FALSE(DTypeFromName("Q8_0R").has_value());  // never asked for by name
  EXPECT_TRUE(IsRuntimeLayout(DType::kQ4_0R));
}

}  // namespace
}  // namespace moe
