#include "lib/backend/cpu/q8_activations.h"

#include <algorithm>
#include <cmath>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/target_clones.h"
#include "lib/base/half.h"

namespace moe {

namespace kernels {
void QuantizeActivationsAvx512(const float* x, int64_t n, Q8Block* out, int64_t span);
void QuantizeActivationsAvx2(const float* x, int64_t n, Q8Block* out, int64_t span);
}  // namespace kernels

namespace {

// span: blocks sharing a scale (BlocksPerScale).
MOE_TARGET_CLONES("avx2", "default")
void QuantizePortable(const float* x, int64_t n, Q8Block* out, int64_t span) {
  for (int64_t b0 = 0; b0 < n / 32; b0 += span) {
    float amax = 0;
    for (int64_t i = 0; i < 32 * span; ++i) amax = std::max(amax, std::fabs(x[32 * b0 + i]));
    // As ggml's q8_0: a block's scale is stored in half precision, the quants use the unrounded
    // one; a super-block's (q8_K) stays a float.
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    const float d = span == 1 ? HalfToFloat(FloatToHalf(amax / 127.0f)) : amax / 127.0f;
    for (int64_t b = b0; b < b0 + span; ++b) {
      const float* v = x + 32 * b;
      Q8Block& o = out[b];
      o.d = d;
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
}

}  // namespace

void SplitSuperBlockSums(const Q8Block* blocks, int64_t n_super, SplitSums* out) {
  for (int64_t s = 0; s < n_super; ++s) {
    SplitSums& o = out[s];
    o = {};
    for (int j = 0; j < 8; ++j) {
      const int sum = blocks[8 * s + j].sum[0] + blocks[8 * s + j].sum[1];
      o.words[j / 4] |= static_cast<uint32_t>((sum >> 6) & 0xff) << (8 * (j % 4));  // [-64, 63]
      o.words[2 + j / 4] |= static_cast<uint32_t>(sum & 63) << (8 * (j % 4));
    }
  }
}

void QuantizeActivations(const float* x, int64_t n, Q8Block* out, ActivationScales scales) {
  const int64_t span = BlocksPerScale(scales);
  if (ActiveSimdLevel() >= SimdLevel::kAvx512) {
    kernels::QuantizeActivationsAvx512(x, n, out, span);
  } else if (ActiveSimdLevel() >= SimdLevel::kAvx2) {
    kernels::QuantizeActivationsAvx2(x, n, out, span);
  } else {
    QuantizePortable(x, n, out, span);
  }
}

}  // namespace moe
