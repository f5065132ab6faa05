// Which activation scales the prepared tokens get, and that products on them are the integer
// products of the row kernels on exactly those blocks: one scale per super-block when every
// weight reading them is a K-quant (as llama.cpp's q8_K), one per block otherwise, and tokens
// gathered from an input prepared the other way are quantized again rather than copied.
#include "lib/backend/cpu/prepared_activations.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/backend/cpu/repack.h"

namespace moe {
namespace {

constexpr int64_t kRows = 32, kCols = 512, kTokens = 6;

// A random matrix of type t, kept as its rows (for the reference) and re-laid in row groups.
struct Matrix {
  Matrix(DType type, std::mt19937& rng) : t(type) {
    std::normal_distribution<float> nd;
    std::vector<float> w(kRows * kCols);
    for (float& v : w) v = nd(rng);
    rows.resize(kRows * RowBytes(t, kCols));
    for (int64_t r = 0; r < kRows; ++r) {
      EXPECT_TRUE(
          QuantizeRow(t, w.data() + r * kCols, rows.data() + r * RowBytes(t, kCols), kCols).ok());
    }
    grouped = rows;
    RepackRows(t, grouped.data(), kRows, kCols);
    view = {RepackedType(t, kRows, kCols), kRows, kCols, grouped.data()};
  }

  // Row r . each token of x quantized with `scales`, by the portable row kernel.
  std::vector<float> Reference(const std::vector<float>& x, ActivationScales scales) const {
    std::vector<Q8Block> q(x.size() / 32);
    for (int64_t k = 0; k < kTokens; ++k)
      QuantizeActivations(&x[k * kCols], kCols, &q[k * kCols / 32], scales);
    std::vector<float> y(kTokens * kRows);
    for (int64_t k = 0; k < kTokens; ++k) {
      for (int64_t r = 0; r < kRows; ++r) {
        y[k * kRows + r] = GetQuantDot(t, SimdLevel::kScalar)(rows.data() + r * RowBytes(t, kCols),
                                                              &q[k * kCols / 32], kCols);
      }
    }
    return y;
  }

  DType t;
  std::vector<uint8_t> rows, grouped;
  WeightView view;
};

std::vector<float> Products(const PreparedActivations& p, const Matrix& m) {
  std::vector<float> y(kTokens * kRows, NAN);
  p.Products(m.view, 0, kRows, y.data(), kRows);
  return y;
}

// The largest difference to want, in units of the rounding the kernels' summation order allows.
double Deviation(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / (1e-5 * (1 + std::fabs(want[i]))));
  return worst;
}

class PreparedActivationsTest : public testing::TestWithParam<SimdLevel> {
 protected:
  PreparedActivationsTest() : rng_(3), q4k_(DType::kQ4_K, rng_), q8_(DType::kQ8_0, rng_) {
    std::normal_distribution<float> nd;
    x_.resize(kTokens * kCols);
    for (float& v : x_) v = nd(rng_);
    for (int64_t k = 0; k < kTokens; ++k)
      x_[k * kCols + 7 * k] = 30;  // outliers, as real rows have
  }

  void SetUp() override {
    if (GetParam() > DetectedSimdLevel()) {
      GTEST_SKIP() << CpuSimdLevelName(GetParam()) << " is not available on this CPU";
    }
  }

  std::mt19937 rng_;
  Matrix q4k_, q8_;
  std::vector<float> x_;
};

TEST_P(PreparedActivationsTest, KQuantsAloneTakeOneScalePerSuperBlock) {
  PreparedActivations p(GetParam(), /*quantize=*/true);
  const WeightView weights[] = {q4k_.view};
  ASSERT_TRUE(p.Prepare(x_.data(), kTokens, kCols, weights));
  p.PrepareTokens(0, kTokens);
  const std::vector<float> got = Products(p, q4k_);
  EXPECT_LT(Deviation(got, q4k_.Reference(x_, ActivationScales::kPerSuperBlock)), 1);
  // The two ways differ by far more than rounding, so the check above tells them apart.
  EXPECT_GT(Deviation(got, q4k_.Reference(x_, ActivationScales::kPerBlock)), 10);
}

TEST_P(PreparedActivationsTest, MixedWeightsTakeOneScalePerBlock) {
  PreparedActivations p(GetParam(), /*quantize=*/true);
  const WeightView weights[] = {q4k_.view, q8_.view};
  ASSERT_TRUE(p.Prepare(x_.data(), kTokens, kCols, weights));
  p.PrepareTokens(0, kTokens);
  EXPECT_LT(Deviation(Products(p, q4k_), q4k_.Reference(x_, ActivationScales::kPerBlock)), 1);
  EXPECT_LT(Deviation(Products(p, q8_), q8_.Reference(x_, ActivationScales::kPerBlock)), 1);
}

TEST_P(PreparedActivationsTest, GatheredTokensGetTheirOwnScalesWhateverTheSourceHas) {
  PreparedActivations src(GetParam(), /*quantize=*/true);
  const WeightView mixed[] = {q4k_.view, q8_.view};
  ASSERT_TRUE(src.Prepare(x_.data(), kTokens, kCols, mixed));
  src.PrepareTokens(0, kTokens);
  // Every token, in another order: the reference rows are permuted the same way.
  const std::vector<int32_t> order = {5, 0, 3, 1, 4, 2};
  std::vector<float> gathered_x(kTokens * kCols);
  for (int64_t k = 0; k < kTokens; ++k)
    std::copy_n(&x_[order[k] * kCols], kCols, &gathered_x[k * kCols]);
  PreparedActivations p(GetParam(), /*quantize=*/true);
  const WeightView k_only[] = {q4k_.view};
  p.PrepareGathered(&src, x_.data(), kCols, order.data(), kTokens, k_only);
  p.PrepareTokens(0, kTokens);
  EXPECT_LT(
      Deviation(Products(p, q4k_), q4k_.Reference(gathered_x, ActivationScales::kPerSuperBlock)),
      1);
  // Gathered from a source prepared the same way, the blocks are copied: the same products.
  PreparedActivations same_src(GetParam(), /*quantize=*/true);
  ASSERT_TRUE(same_src.Prepare(x_.data(), kTokens, kCols, k_only));
  same_src.PrepareTokens(0, kTokens);
  PreparedActivations copied(GetParam(), /*quantize=*/true);
  copied.PrepareGathered(&same_src, x_.data(), kCols, order.data(), kTokens, k_only);
  copied.PrepareTokens(0, kTokens);
  EXPECT_EQ(Products(copied, q4k_), Products(p, q4k_));
}

// The expert pass quantizes its activations a unit of columns at a time, by whichever thread
// completes the unit: the products must be those of the tokens quantized whole.
TEST_P(PreparedActivationsTest, ColumnsPreparedUnitByUnitGiveTheTokensProducts) {
  const WeightView k_only[] = {q4k_.view};
  const WeightView mixed[] = {q4k_.view, q8_.view};
  // Rows not in sixteens take the row kernels, which also read the blocks' sums as floats.
  const WeightView row_kernel[] = {{DType::kQ4_K, 8, kCols, q4k_.rows.data()}};
  for (absl::Span<const WeightView> weights :
       {absl::Span<const WeightView>(k_only), absl::Span<const WeightView>(mixed),
        absl::Span<const WeightView>(row_kernel)}) {
    PreparedActivations whole(GetParam(), /*quantize=*/true);
    ASSERT_TRUE(whole.Prepare(x_.data(), kTokens, kCols, weights));
    whole.PrepareTokens(0, kTokens);
    PreparedActivations by_units(GetParam(), /*quantize=*/true);
    ASSERT_TRUE(by_units.Prepare(x_.data(), kTokens, kCols, weights));
    const int64_t unit = by_units.ColumnUnit();
    EXPECT_EQ(unit, weights.size() == 1 ? kSuperBlockValues : 32);
    for (int64_t c = kCols - unit; c >= 0; c -= unit) by_units.PrepareColumns(c, c + unit);
    for (const WeightView& w : weights) {
      std::vector<float> want(kTokens * w.rows, NAN), got(kTokens * w.rows, NAN);
      whole.Products(w, 0, w.rows, want.data(), w.rows);
      by_units.Products(w, 0, w.rows, got.data(), w.rows);
      EXPECT_EQ(got, want) << DTypeName(w.dtype) << " x " << w.rows;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, PreparedActivationsTest,
                         testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                         SimdLevel::kAvx512Vnni),
                         [](const testing::TestParamInfo<SimdLevel>& i) {
                           return std::string(CpuSimdLevelName(i.param));
                         });

}  // namespace
}  // namespace moe
