// A gated delta net's step (one value head, one position) at every SIMD level against the rule
// computed in double: S <- decay S + k (beta (v - decay S^T k))^T, y = S^T q x scale, through
// twenty positions carried in the same state, for sizes that fill the vector lanes and sizes
// that leave some over (those take the portable kernel).
#include "lib/backend/cpu/delta_net_step.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

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

TEST(DeltaNetStepTest, EveryLevelFollowsTheDeltaRule) {
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  for (SimdLevel l : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (l <= DetectedSimdLevel()) levels.push_back(l);
  }
  for (int64_t n : {128, 64, 48, 16, 8, 20}) {
    for (SimdLevel level : levels) {
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

}  // namespace
}  // namespace moe
