// The CUDA activation quantizer and quantized matrix-vector product against the CPU's portable
// kernel (ScalarQuantDot), bit for bit, on every quantized block type (label gpu). Without a CUDA
// device it skips and says why: compiled here, never run (docs/cuda.md).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dequantize.h"
#include "kernels/quant_matvec.h"
#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/dtype.h"

namespace moe {
namespace {

TEST(CudaQuantMatVecTest, EveryBlockTypeIsTheCpusBitForBit) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const int64_t rows = 300, cols = 1024;
  std::vector<float> a(cols);
  for (float& v : a) v = nd(rng);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kMXFP4, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const bool k_quant = GetDTypeInfo(t).block_elems == 256;
    std::vector<Q8Block> x(cols / 32);
    QuantizeActivations(a.data(), cols, x.data(),
                        k_quant ? ActivationScales::kPerSuperBlock : ActivationScales::kPerBlock);
    const size_t row_bytes = RowBytes(t, cols);
    std::vector<uint8_t> w(rows * row_bytes);
    std::vector<float> row(cols), want(rows), got(rows, -1.f);
    const QuantDotFn dot = kernels::ScalarQuantDot(t);
    ASSERT_NE(dot, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = nd(rng);
      ASSERT_TRUE(QuantizeRow(t, row.data(), w.data() + r * row_bytes, cols).ok());
      want[r] = dot(w.data() + r * row_bytes, x.data(), cols);
    }
    const std::string err =
        cuda::QuantMatVecFromHost(t, w.data(), w.size(), x.data(), got.data(), rows, cols);
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_EQ(got, want);
    // The activations quantized on the device too: the same blocks, so the same result.
    std::vector<float> from_floats(rows, -1.f);
    const std::string err2 = cuda::QuantMatVecF32FromHost(t, w.data(), w.size(), a.data(),
                                                          from_floats.data(), rows, cols);
    ASSERT_TRUE(err2.empty()) << err2;
    EXPECT_EQ(from_floats, want);
    // The decode kernel: lanes share a row's blocks, so only the float sum's order differs.
    std::vector<float> warp(rows, NAN);
    const std::string err3 =
        cuda::QuantMatVecWarpFromHost(t, w.data(), w.size(), x.data(), warp.data(), rows, cols);
    ASSERT_TRUE(err3.empty()) << err3;
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(warp[r], want[r], 1e-5f * std::max(1.f, std::fabs(want[r]))) << "row " << r;
    }
  }
}

TEST(CudaQuantMatVecTest, TheWarpKernelTakesEveryRowLengthAndRowCount) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(10);
  std::normal_distribution<float> nd;
  // Rows of 1 to 80 blocks (segments of 1 to 32 lanes, several rows to a warp), row counts that
  // leave a warp part-filled.
  for (DType t : {DType::kQ8_0, DType::kQ4_K}) {
    const int64_t elems = GetDTypeInfo(t).block_elems;
    for (int64_t blocks : {1, 3, 4, 31, 32, 33, 80}) {
      for (int64_t rows : {1, 7, 33, 130}) {
        SCOPED_TRACE(std::string(DTypeName(t)) + " blocks " + std::to_string(blocks) + " rows " +
                     std::to_string(rows));
        const int64_t cols = blocks * elems;
        std::vector<float> a(cols), row(cols), want(rows), got(rows, NAN);
        for (float& v : a) v = nd(rng);
        std::vector<Q8Block> x(cols / 32);
        QuantizeActivations(
            a.data(), cols, x.data(),
            elems == 256 ? ActivationScales::kPerSuperBlock : ActivationScales::kPerBlock);
        const size_t row_bytes = RowBytes(t, cols);
        std::vector<uint8_t> w(rows * row_bytes);
        for (int64_t r = 0; r < rows; ++r) {
          for (float& v : row) v = nd(rng);
          ASSERT_TRUE(QuantizeRow(t, row.data(), w.data() + r * row_bytes, cols).ok());
          want[r] = kernels::ScalarQuantDot(t)(w.data() + r * row_bytes, x.data(), cols);
        }
        const std::string err =
            cuda::QuantMatVecWarpFromHost(t, w.data(), w.size(), x.data(), got.data(), rows, cols);
        ASSERT_TRUE(err.empty()) << err;
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_NEAR(got[r], want[r], 1e-5f * std::max(1.f, std::fabs(want[r]))) << "row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe
