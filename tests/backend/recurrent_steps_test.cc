// The recurrent layers' per-token state updates (recurrent_steps.h) at every SIMD level against
// their rules computed in double, through twenty positions carried in the same state, for sizes
// that fill the vector lanes and sizes that leave some over (those take the portable kernels):
// a gated delta net's step, S <- decay S + k (beta (v - decay S^T k))^T, y = S^T q x scale; and
// Mamba-2's scan step, each state row decaying by e^(dt a) and taking x dt B, y = C . row + D x,
// for head sizes with and without a remainder of the four rows the vector kernels take at once.
#include "lib/backend/cpu/recurrent_steps.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  for (SimdLevel l : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (l <= DetectedSimdLevel()) levels.push_back(l);
  }
  return levels;
}

// The state is stored transposed: row j holds S[., j].
void StepInDouble(std::vector<double>& s, const std::vector<float>& q, const std::vector<float>& k,
                  const std::vector<float>& v, double decay, double beta, int64_t n, double scale,
                  std::vector<double>& y) {
  for (int64_t j = 0; j < n; ++j) {
    double sk = 0;
    for (int64_t i = 0; i < n; ++i) sk += s[j * n + i] * decay * k[i];
    const double delta = (v[j] - sk) * beta;
    double out = 0;
    for (int64_t i = 0; i < n; ++i) {
      s[j * n + i] = s[j * n + i] * decay + k[i] * delta;
      out += s[j * n + i] * q[i];
    }
    y[j] = out * scale;
  }
}

std::vector<float> UnitVector(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(n);
  double sum = 0;
  for (float& z : x) sum += (z = nd(rng)) * z;
  for (float& z : x) z = static_cast<float>(z / std::sqrt(sum));
  return x;
}

TEST(RecurrentStepsTest, GatedDeltaStepFollowsTheDeltaRuleAtEveryLevel) {
  for (int64_t n : {128, 64, 48, 16, 8, 20}) {
    for (SimdLevel level : Levels()) {
      std::mt19937 rng(static_cast<unsigned>(n));
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> state(n * n);
      for (float& z : state) z = 0.3f * nd(rng);
      std::vector<double> want_state(state.begin(), state.end()), want_y(n);
      std::vector<float> y(n);
      const float scale = 1.f / std::sqrt(static_cast<float>(n));
      for (int t = 0; t < 20; ++t) {
        const std::vector<float> q = UnitVector(rng, n), k = UnitVector(rng, n);
        std::vector<float> v(n);
        for (float& z : v) z = nd(rng);
        const float decay = 0.8f + 0.01f * t, beta = 0.3f + 0.02f * t;
        GetGatedDeltaStep(level)(state.data(), q.data(), k.data(), v.data(), decay, beta, n, scale,
                                 y.data());
        StepInDouble(want_state, q, k, v, decay, beta, n, scale, want_y);
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_NEAR(y[j], want_y[j], 2e-5 * (1 + std::fabs(want_y[j])))
              << CpuSimdLevelName(level) << " size " << n << " position " << t << " row " << j;
        }
      }
      for (int64_t i = 0; i < n * n; ++i) {
        ASSERT_NEAR(state[i], want_state[i], 2e-5 * (1 + std::fabs(want_state[i])))
            << CpuSimdLevelName(level) << " size " << n << " state " << i;
      }
    }
  }
}

TEST(RecurrentStepsTest, SsmScanStepFollowsTheScanAtEveryLevel) {
  for (int64_t state_size : {128, 64, 48, 16, 8, 20}) {
    for (int64_t head_dim : {64, 6}) {
      for (SimdLevel level : Levels()) {
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
