#include "lib/backend/cpu/gemm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(GemmTest, EveryLevelAgreesWithThePortableKernel) {
  if (DetectedSimdLevel() < SimdLevel::kAvx512) {
    GTEST_SKIP() << "no AVX-512 on this CPU: only the portable GEMM exists here";
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto [rows, n, cols] : {std::tuple{1, 1, 16}, std::tuple{5, 7, 48}, std::tuple{16, 9, 1024},
                               std::tuple{3, 4, 40}}) {
    std::vector<float> w(rows * cols), x(n * cols);
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = nd(rng);
    const int64_t ldy = rows + 3;  // outputs are strided rows of a larger matrix
    std::vector<float> want(n * ldy, -1.f), got(n * ldy, -1.f);
    kernels::GemmScalar(w.data(), rows, x.data(), n, cols, want.data(), ldy);
    for (SimdLevel level : {SimdLevel::kAvx512, SimdLevel::kAvx512Vnni}) {
      if (level > DetectedSimdLevel()) continue;
      std::fill(got.begin(), got.end(), -1.f);
      GetGemm(level)(w.data(), rows, x.data(), n, cols, got.data(), ldy);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
            << "rows " << rows << " n " << n << " cols " << cols << " at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace moe
