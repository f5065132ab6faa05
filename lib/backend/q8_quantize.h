// Activations to 8-bit blocks (Q8Block) for the integer dot products: the portable definition
// that the CPU backend's SIMD quantizers are tested against and the CUDA kernels run (issue 21's
// numeric core, beside block_decode.h and block_dot.h).
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/backend/cpu/q8_activations.h"
#include "lib/base/half.h"
#include "lib/base/host_device.h"

namespace moe {

// The `span` blocks of 32 values at x (BlocksPerScale: 1, or 8 for a K-quant super-block)
// quantized with one scale into out[0..span). As ggml's q8_0: a block's scale is stored in half
// precision, the quants use the unrounded one; a super-block's (q8_K) stays a float.
MOE_HOST_DEVICE inline void QuantizeQ8Span(const float* x, int64_t span, Q8Block* out) {
  float amax = 0;
  for (int64_t i = 0; i < 32 * span; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
  }
  const float id = amax != 0 ? 127.0f / amax : 0.0f;
  const float d = span == 1 ? HalfToFloat(FloatToHalf(amax / 127.0f)) : amax / 127.0f;
  for (int64_t b = 0; b < span; ++b) {
    const float* v = x + 32 * b;
    Q8Block& o = out[b];
    o.d = d;
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 32; ++i) {
      // A NaN or infinite activation (from corrupt weights) must not overflow the conversion.
      const float r = std::nearbyint(v[i] * id);
      const int q = std::isfinite(r) ? static_cast<int>(r < -127.0f  ? -127.0f
                                                        : r > 127.0f ? 127.0f
                                                                     : r)
                                     : 0;
      o.q[i] = static_cast<int8_t>(q);
      (i < 16 ? s0 : s1) += q;
    }
    o.sum[0] = static_cast<int16_t>(s0);
    o.sum[1] = static_cast<int16_t>(s1);
    o.dsum = o.d * static_cast<float>(s0 + s1);
  }
}

}  // namespace moe
