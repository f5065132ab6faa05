#include "lib/backend/cpu/q8_activations.h"

#include <algorithm>
#include <cmath>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/target_clones.h"
#include "lib/backend/q8_quantize.h"
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
  for (int64_t b0 = 0; b0 < n / 32; b0 += span) QuantizeQ8Span(x + 32 * b0, span, out + b0);
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
