// The CUDA embedding-row gather, token-to-expert dispatch and weighted combine against the CPU
// (label gpu), all bit for bit: the gather decodes with the CPU's block decoders, the dispatch
// runs the core expert_dispatch_test checks, the combine sums as the CPU does
// (device_decomposition_test). Without a CUDA device they skip and say why: compiled here, never
// run (docs/cuda.md).
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/combine.h"
#include "kernels/dequantize.h"
#include "kernels/expert_dispatch.h"
#include "kernels/get_rows.h"
#include "lib/backend/backend.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/dtype.h"
#include "lib/moe/expert_dispatch.h"

namespace moe {
namespace {

bool NoGpu(std::string* why) { return cuda::DeviceCount(why) == 0; }

TEST(CudaRowsAndExpertsTest, GetRowsIsTheCpusForEveryTableType) {
  std::string why;
  if (NoGpu(&why)) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  auto cpu = CreateCpuBackend(1);
  const int64_t rows = 50, cols = 512, n = 9;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kMXFP4,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const size_t row_bytes = RowBytes(t, cols);
    std::vector<uint8_t> table(rows * row_bytes);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = nd(rng);
      ASSERT_TRUE(QuantizeRow(t, row.data(), table.data() + r * row_bytes, cols).ok());
    }
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % rows);
    std::vector<float> want(n * cols), got(n * cols, -1.f);
    cpu->GetRows(WeightView{t, rows, cols, table.data()}, ids.data(), n, want.data());
    const std::string err =
        cuda::GetRowsFromHost(t, table.data(), table.size(), rows, cols, ids.data(), n, got.data());
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_EQ(got, want);
  }
}

TEST(CudaRowsAndExpertsTest, DispatchIsTheCoresLists) {
  std::string why;
  if (NoGpu(&why)) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t n_expert = 1 + static_cast<int32_t>(rng() % 256);
    const int64_t n = rng() % 600, k = 1 + rng() % 8;
    std::vector<int32_t> experts(n * k);
    for (int32_t& e : experts) e = rng() % 9 == 0 ? -1 : static_cast<int32_t>(rng() % n_expert);
    std::vector<int64_t> want_offsets(n_expert + 1), got_offsets(n_expert + 1, -7);
    std::vector<int32_t> want_tokens(n * k), want_place(n * k), got_tokens(n * k, -7),
        got_place(n * k, -7);
    DispatchExperts(experts.data(), n, k, n_expert, want_offsets.data(), want_tokens.data(),
                    want_place.data());
    const std::string err = cuda::DispatchExpertsFromHost(
        experts.data(), n, k, n_expert, got_offsets.data(), got_tokens.data(), got_place.data());
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_EQ(got_offsets, want_offsets);
    EXPECT_EQ(got_place, want_place);
    want_tokens.resize(want_offsets.back());
    got_tokens.resize(want_offsets.back());
    EXPECT_EQ(got_tokens, want_tokens);
  }
}

TEST(CudaRowsAndExpertsTest, CombineIsTheCpusBitForBit) {
  std::string why;
  if (NoGpu(&why)) GTEST_SKIP() << "skipped, no GPU here: " << why;
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  auto cpu = CreateCpuBackend(1);
  const int64_t n = 7, k = 8, dim = 2880;
  std::vector<std::vector<float>> rows(n * k, std::vector<float>(dim));
  std::vector<const float*> src(n * k);
  std::vector<float> w(n * k);
  for (int64_t s = 0; s < n * k; ++s) {
    for (float& v : rows[s]) v = nd(rng);
    src[s] = s % 6 == 5 ? nullptr : rows[s].data();
    w[s] = nd(rng);
  }
  std::vector<float> want(n * dim);
  for (float& v : want) v = nd(rng);
  std::vector<float> got = want;
  cpu->AddWeightedRows(n, k, dim, src.data(), w.data(), want.data());
  const std::string err =
      cuda::AddWeightedRowsFromHost(n, k, dim, src.data(), w.data(), got.data());
  ASSERT_TRUE(err.empty()) << err;
  EXPECT_EQ(got, want);
}

TEST(CudaRowsAndExpertsTest, BadShapesAreErrorsNotLaunches) {
  float out[32];
  int32_t ids[1] = {0};
  uint8_t table[64] = {};
  EXPECT_FALSE(cuda::GetRowsFromHost(DType::kQ8_0, table, 34, 1, 31, ids, 1, out).empty());
  EXPECT_FALSE(cuda::GetRowsFromHost(DType::kQ8_0X16, table, 64, 1, 32, ids, 1, out).empty());
  int64_t offsets[2];
  EXPECT_FALSE(cuda::DispatchExpertsFromHost(ids, 1, 1, 0, offsets, ids, ids).empty());
  EXPECT_FALSE(cuda::AddWeightedRowsFromHost(-1, 1, 1, nullptr, out, out).empty());
}

}  // namespace
}  // namespace moe
