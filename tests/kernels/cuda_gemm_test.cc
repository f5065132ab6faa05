// The cuBLAS prompt products (label gpu): F32 weights against a double-precision reference, and
// quantized weights (decoded to F16, activations rounded to F16, F32 sums) against the same
// roundings done on the CPU and summed in double. Without a CUDA device it skips and says why:
// compiled here, never run (docs/cuda.md).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dequantize.h"
#include "kernels/gemm.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/dtype.h"
#include "lib/base/half.h"

namespace moe {
namespace {

TEST(CudaGemmTest, MatchesTheRoundingsItMakesSummedInDouble) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(14);
  std::normal_distribution<float> nd;
  for (DType t : {DType::kF32, DType::kQ8_0, DType::kQ4_0, DType::kMXFP4, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const int64_t rows = 96, cols = 512, n = 37;
    const size_t row_bytes = RowBytes(t, cols);
    std::vector<uint8_t> w(rows * row_bytes);
    std::vector<float> row(cols), decoded(rows * cols), x(n * cols), got(n * rows, NAN);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = nd(rng);
      ASSERT_TRUE(QuantizeRow(t, row.data(), w.data() + r * row_bytes, cols).ok());
      DequantizeRow(t, w.data() + r * row_bytes, decoded.data() + r * cols, cols);
    }
    for (float& v : x) v = nd(rng);
    const std::string err =
        cuda::GemmFromHost(t, w.data(), w.size(), rows, cols, x.data(), n, got.data());
    ASSERT_TRUE(err.empty()) << err;
    const bool halves = t != DType::kF32;
    for (int64_t tok = 0; tok < n; ++tok) {
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0, magnitude = 0;
        for (int64_t i = 0; i < cols; ++i) {
          float a = decoded[r * cols + i], b = x[tok * cols + i];
          if (halves) {
            a = HalfToFloat(FloatToHalf(a));
            b = HalfToFloat(FloatToHalf(b));
          }
          want += static_cast<double>(a) * b;
          magnitude += std::fabs(static_cast<double>(a) * b);
        }
        // F32 sums of cols terms in cuBLAS's order (tensor cores included).
        EXPECT_NEAR(got[tok * rows + r], want, 1e-5 * std::max(1.0, magnitude))
            << "token " << tok << " row " << r;
      }
    }
  }
}

TEST(CudaGemmTest, BadShapesAreErrorsNotLaunches) {
  float x[4] = {}, y[4];
  uint8_t w[64] = {};
  EXPECT_FALSE(cuda::GemmFromHost(DType::kQ8_0, w, 34, 1, 31, x, 1, y).empty());
  EXPECT_FALSE(cuda::GemmFromHost(DType::kQ8_0X16, w, 64, 1, 32, x, 1, y).empty());
  EXPECT_FALSE(cuda::GemmFromHost(DType::kF32, w, 64, -1, 4, x, 1, y).empty());
}

}  // namespace
}  // namespace moe
