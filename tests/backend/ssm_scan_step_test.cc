// A Mamba-2 scan step (one head, one position) at every SIMD level against the rule computed in
// double: each state row decays by e^(dt a) and takes x dt B, y = C . row + D x, through twenty
// positions carried in the same state, for state sizes that fill the vector lanes and sizes that
// leave some over (those take the portable kernel), head sizes with and without a remainder of
// the four rows the vector kernels take at once.
#include "lib/backend/cpu/ssm_scan_step.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(SsmScanStepTest, EveryLevelFollowsTheScan) {
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  for (SimdLevel l : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (l <= DetectedSimdLevel()) levels.push_back(l);
  }
  for (int64_t state_size : {128, 64, 48, 16, 8, 20}) {
    for (int64_t head_dim : {64, 6}) {
      for (SimdLevel level : levels) {
        std::mt19937 rng(static_cast<unsigned>(state_size * 131 + head_dim));
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<float> state(head_dim * state_size);
        for (float& z : state) z = 0.3f * nd(rng);
        std::vector<double> want(state.begin(), state.end());
        std::vector<float> y(head_dim);
        for (int t = 0; t < 20; ++t) {
          std::vector<float> x(head_dim), b(state_size), c(state_size);
          for (float& z : x) z = nd(rng);
          for (float& z : b) z = nd(rng);
          for (float& z : c) z = nd(rng);
          const float dt = 0.05f + 0.01f * t, a = -0.7f, d = 0.9f;
          GetSsmScanStep(level)(state.data(), x.data(), b.data(), c.data(), dt, a, d, head_dim,
                                state_size, y.data());
          const double decay = std::exp(static_cast<double>(dt) * a);
          for (int64_t i = 0; i < head_dim; ++i) {
            double sum = 0;
            for (int64_t j = 0; j < state_size; ++j) {
              double& s = want[i * state_size + j];
              s = s * decay + static_cast<double>(b[j]) * x[i] * dt;
              sum += s * c[j];
            }
            const double want_y = sum + static_cast<double>(d) * x[i];
            ASSERT_NEAR(y[i], want_y, 2e-5 * (1 + std::fabs(want_y)))
                << CpuSimdLevelName(level) << " state " << state_size << " head " << head_dim
                << " position " << t << " row " << i;
          }
        }
        for (size_t i = 0; i < state.size(); ++i) {
          ASSERT_NEAR(state[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
              << CpuSimdLevelName(level) << " state " << state_size << " value " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe
