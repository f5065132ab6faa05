// The run-time row layouts hold exactly the values of the rows they came from, and their
// kernels compute the same products.
#include "lib/backend/cpu/repack.h"

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/group_products.h"
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
      const DType rt = RepackedType(t, rows, cols);
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

// Every row of a 16-row group dequantizes exactly as before, and the group kernels at every
// level compute the integer products of the row kernels (float sums in another order), for
// batches of every size around the kernels' 8-token tiles, with activation scales per block or
// per super-block (what K-quant weights are given).
TEST(RepackTest, RowGroupsKeepTheirValuesAndProducts) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kMXFP4, DType::kQ2_K, DType::kQ3_K, DType::kQ5_0, DType::kIQ4_NL,
                  DType::kIQ4_XS, DType::kQ4_1, DType::kQ5_1}) {
    for (int64_t cols : {256, 1024, 1536 + 256}) {
      const int64_t rows = 32;
      std::vector<float> w(rows * cols);
      for (auto& v : w) v = nd(rng);
      const size_t row_bytes = RowBytes(t, cols);
      std::vector<uint8_t> original(rows * row_bytes);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(
            QuantizeRow(t, w.data() + r * cols, original.data() + r * row_bytes, cols).ok());
      }
      const DType gt = RepackedType(t, rows, cols);
      ASSERT_EQ(RowGroup(gt), kGroupRows) << DTypeName(t);
      ASSERT_EQ(RowBytes(gt, cols), row_bytes);
      std::vector<uint8_t> grouped = original;
      RepackRows(t, grouped.data(), rows, cols);
      EXPECT_NE(grouped, original);
      const WeightView view{gt, rows, cols, grouped.data()};
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> a(cols), b(cols);
        DequantizeRow(t, original.data() + r * row_bytes, a.data(), cols);
        DequantizeWeightRow(view, r, b.data());
        ASSERT_EQ(a, b) << DTypeName(gt) << " cols " << cols << " row " << r;
      }
      for (auto [n, scales] : {std::pair{1, ActivationScales::kPerBlock},
                               {2, ActivationScales::kPerBlock},
                               {7, ActivationScales::kPerBlock},
                               {8, ActivationScales::kPerBlock},
                               {9, ActivationScales::kPerBlock},
                               {19, ActivationScales::kPerBlock},
                               {1, ActivationScales::kPerSuperBlock},
                               {5, ActivationScales::kPerSuperBlock},
                               {19, ActivationScales::kPerSuperBlock}}) {
        std::vector<float> x(n * cols);
        for (auto& v : x) v = 2 * nd(rng);
        x[5] = 40;  // one outlier, as real activations have
        std::vector<Q8Block> xq(n * cols / 32);
        for (int64_t k = 0; k < n; ++k)
          QuantizeActivations(x.data() + k * cols, cols, xq.data() + k * cols / 32, scales);
        std::vector<SplitSums> split;
        if (scales == ActivationScales::kPerSuperBlock) {
          split.resize(n * cols / kSuperBlockValues);
          SplitSuperBlockSums(xq.data(), static_cast<int64_t>(split.size()), split.data());
        }
        for (SimdLevel level :
             {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvxVnni, SimdLevel::kAvx512Vnni}) {
          if (!CpuSupportsLevel(level)) continue;
          const GroupProductsFn products = GetGroupProducts(gt, level, scales);
          ASSERT_NE(products, nullptr);
          std::vector<float> y(n * rows, NAN);
          for (int64_t g = 0; g < rows; g += kGroupRows) {
            const uint8_t* next = g + kGroupRows < rows ? view.row(g + kGroupRows) : nullptr;
            products(view.row(g), cols, xq.data(), split.empty() ? nullptr : split.data(), n,
                     y.data() + g, rows, next);
          }
          for (int64_t k = 0; k < n; ++k) {
            for (int64_t r = 0; r < rows; ++r) {
              const float want = GetQuantDot(t, SimdLevel::kScalar)(
                  original.data() + r * row_bytes, xq.data() + k * cols / 32, cols);
              // Sums in another order differ by rounding, which scales with the terms' size
              // (sum |w_i x_i|), not with the result's; one wrong quant moves it by ~|w_i x_i|.
              std::vector<float> wr(cols);
              DequantizeRow(t, original.data() + r * row_bytes, wr.data(), cols);
              double l1 = 0;
              for (int64_t i = 0; i < cols; ++i) l1 += std::fabs(wr[i] * x[k * cols + i]);
              EXPECT_NEAR(y[k * rows + r], want, 1e-6 * l1)
                  << DTypeName(gt) << " " << CpuSimdLevelName(level) << " cols " << cols
                  << " tokens " << n << " token " << k << " row " << r << " scales "
                  << (scales == ActivationScales::kPerBlock ? "per block" : "per super-block");
            }
          }
        }
      }
    }
  }
}

// The group kernels turn E8M0 bytes into 2^(e - 128) by bit tricks: every exponent, the two
// that make subnormal scales included, must give the scalar kernel's value. Activations near
// 1e6 (their f16 block scales near 1e4) keep every product a normal float.
TEST(RepackTest, Mxfp4GroupsTakeEveryScaleExponent) {
  std::mt19937 rng(23);
  const int64_t rows = 16, cols = 64, nb = cols / 32;
  const uint8_t exponents[] = {0, 1, 2, 3, 64, 126, 127, 128, 130};
  std::vector<uint8_t> original(rows * RowBytes(DType::kMXFP4, cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* block = original.data() + (r * nb + b) * 17;
      block[0] = exponents[(r * nb + b) % std::size(exponents)];
      for (int j = 1; j < 17; ++j) block[j] = static_cast<uint8_t>(rng());
    }
  }
  std::normal_distribution<float> nd;
  std::vector<float> x(cols);
  for (auto& v : x) v = 1e6f * nd(rng);
  std::vector<Q8Block> xq(nb);
  QuantizeActivations(x.data(), cols, xq.data());
  std::vector<uint8_t> grouped = original;
  RepackRows(DType::kMXFP4, grouped.data(), rows, cols);
  for (SimdLevel level :
       {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvxVnni, SimdLevel::kAvx512Vnni}) {
    if (!CpuSupportsLevel(level)) continue;
    std::vector<float> y(rows, NAN);
    GetGroupProducts(DType::kMXFP4X16, level)(grouped.data(), cols, xq.data(), nullptr, 1, y.data(),
                                              rows, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = original.data() + r * RowBytes(DType::kMXFP4, cols);
      const float want = GetQuantDot(DType::kMXFP4, SimdLevel::kScalar)(row, xq.data(), cols);
      EXPECT_NEAR(y[r], want, 1e-5 * std::fabs(want))
          << CpuSimdLevelName(level) << " row " << r << " exponents " << int{row[0]} << ", "
          << int{row[17]};
      EXPECT_NE(want, 0) << "row " << r;
    }
  }
}

TEST(RepackTest, RowsThatDoNotFitKeepTheirType) {
  EXPECT_EQ(RepackedType(DType::kQ4_0, 3, 96), DType::kQ4_0);  // Q4_0R groups 4 blocks
  EXPECT_EQ(RepackedType(DType::kQ8_0, 3, 96), DType::kQ8_0R);
  EXPECT_EQ(RepackedType(DType::kQ4_K, 3, 256), DType::kQ4_K);
  EXPECT_EQ(RepackedType(DType::kQ5_K, 32, 256), DType::kQ5_KX16);
  EXPECT_EQ(RepackedType(DType::kQ6_K, 32, 256), DType::kQ6_KX16);
  // Sixteen-row groups where the rows divide into them.
  EXPECT_EQ(RepackedType(DType::kQ4_0, 32, 96), DType::kQ4_0X16);
  EXPECT_EQ(RepackedType(DType::kQ8_0, 16, 96), DType::kQ8_0X16);
  EXPECT_EQ(RepackedType(DType::kQ4_K, 48, 256), DType::kQ4_KX16);
  EXPECT_EQ(RepackedType(DType::kQ4_K, 40, 256), DType::kQ4_K);
  EXPECT_EQ(RepackedType(DType::kMXFP4, 32, 96), DType::kMXFP4X16);
  EXPECT_EQ(RepackedType(DType::kMXFP4, 40, 96), DType::kMXFP4);  // no MXFP4 row layout
  EXPECT_EQ(RowGroup(DType::kMXFP4X16), 16);
  EXPECT_EQ(GroupSourceType(DType::kMXFP4X16), DType::kMXFP4);
  EXPECT_TRUE(IsRuntimeLayout(DType::kMXFP4X16));
  EXPECT_FALSE(IsRuntimeLayout(DType::kMXFP4));
  EXPECT_TRUE(IsStorableDType(DType::kMXFP4X16));
  EXPECT_EQ(RowGroup(DType::kQ4_KX16), 16);
  EXPECT_EQ(RepackedType(DType::kQ2_K, 32, 512), DType::kQ2_KX16);
  // Q5_0 and IQ4_NL have group kernels only with AVX-512 VNNI: below it their rows stay.
  EXPECT_EQ(RepackedType(DType::kQ5_0, 32, 96), DType::kQ5_0X16);
  EXPECT_EQ(RepackedType(DType::kIQ4_NL, 16, 96), DType::kIQ4_NLX16);
  EXPECT_EQ(RepackedType(DType::kQ5_0, 32, 96, SimdLevel::kAvx2), DType::kQ5_0);
  EXPECT_EQ(RepackedType(DType::kIQ4_NL, 32, 96, SimdLevel::kAvx2), DType::kIQ4_NL);
  EXPECT_EQ(RepackedType(DType::kQ5_0, 24, 96), DType::kQ5_0);
  EXPECT_EQ(RepackedType(DType::kIQ4_XS, 16, 512), DType::kIQ4_XSX16);
  EXPECT_EQ(RepackedType(DType::kIQ4_XS, 16, 512, SimdLevel::kAvx2), DType::kIQ4_XS);
  EXPECT_EQ(GroupSourceType(DType::kIQ4_XSX16), DType::kIQ4_XS);
  EXPECT_EQ(RepackedType(DType::kQ4_1, 16, 96), DType::kQ4_1X16);
  EXPECT_EQ(RepackedType(DType::kQ5_1, 16, 96), DType::kQ5_1X16);
  EXPECT_EQ(RepackedType(DType::kQ5_1, 16, 96, SimdLevel::kAvx2), DType::kQ5_1);
  EXPECT_EQ(GroupSourceType(DType::kQ5_0X16), DType::kQ5_0);
  EXPECT_EQ(GroupSourceType(DType::kIQ4_NLX16), DType::kIQ4_NL);
  EXPECT_TRUE(IsStorableDType(DType::kQ5_0X16));
  EXPECT_EQ(RepackedType(DType::kQ3_K, 16, 256), DType::kQ3_KX16);
  EXPECT_EQ(RepackedType(DType::kQ3_K, 24, 256), DType::kQ3_K);  // no row layout for them
  EXPECT_EQ(GroupSourceType(DType::kQ2_KX16), DType::kQ2_K);
  EXPECT_EQ(GroupSourceType(DType::kQ3_KX16), DType::kQ3_K);
  EXPECT_EQ(GroupSourceType(DType::kQ3_K), DType::kQ3_K);  // not a group: itself
  EXPECT_EQ(RowGroup(DType::kQ3_KX16), 16);
  EXPECT_TRUE(IsStorableDType(DType::kQ2_KX16));
  EXPECT_EQ(RowGroup(DType::kQ8_0R), 1);
  EXPECT_FALSE(DTypeFromName("Q8_0R").has_value());  // never asked for by name
  EXPECT_TRUE(IsRuntimeLayout(DType::kQ4_0R));
}

}  // namespace
}  // namespace moe
