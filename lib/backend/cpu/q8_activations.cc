#include "lib/backend/cpu/q8_activations.h"

#include <algorithm>
#include <cmath>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/base/half.h"

namespace moe {

namespace kernels {
void QuantizeActivationsAvx512(const float* x, int64_t n, Q8Block* out);
void QuantizeActivationsAvx2(const float* x, int64_t n, Q8Block* out);
}  // namespace kernels

namespace {

__attribute__((target_clones("avx2", "default"))) void QuantizePortable(const float* x, int64_t n,
                                                                        Q8Block* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + 32 * b;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    // As ggml's q8_0: the scale is stored in half precision, the quants use the unrounded one.
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    Q8Block& o = out[b];
    o.d = HalfToFloat(FloatToHalf(amax / 127.0f));
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 32; ++i) {
      // A NaN or infinite activation (from corrupt weights) must not overflow the conversion.
      const float r = std::nearbyint(v[i] * id);
      const int q = std::isfinite(r) ? static_cast<int>(std::clamp(r, -127.0f, 127.0f)) : 0;
      o.q[i] = static_cast<int8_t>(q);
      (i < 16 ? s0 : s1) += q;
    }
    o.sum[0] = static_cast<int16_t>(s0);
    o.sum[1] = static_cast<int16_t>(s1);
    o.dsum = o.d * static_cast<float>(s0 + s1);
  }
}

}  // namespace

void QuantizeActivations(const float* x, int64_t n, Q8Block* out) {
  if (ActiveSimdLevel() >= SimdLevel::kAvx512) {
    kernels::QuantizeActivationsAvx512(x, n, out);
  } else if (ActiveSimdLevel() >= SimdLevel::kAvx2) {
    kernels::QuantizeActivationsAvx2(x, n, out);
  } else {
    QuantizePortable(x, n, out);
  }
}

}  // namespace moe
