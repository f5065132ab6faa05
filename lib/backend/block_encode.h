// Encoding of a GGUF Q8_0 block (ggml's reference: d = max|x| / 127 as a half, q = round(x / d)),
// written once as a MOE_HOST_DEVICE function: the model quantizer (QuantizeRow) and the KV
// cache's Q8_0 rows on the CPU run it, and so does the CUDA cache store (kernels/store_kv.cu;
// issue 21's one numeric core).
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/base/half.h"
#include "lib/base/host_device.h"

namespace moe {

// 32 values of x into 34 bytes at dst: the half scale, then 32 signed quants.
MOE_HOST_DEVICE inline void EncodeQ8_0Block(const float* x, uint8_t* dst) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j]);
    amax = amax < a ? a : amax;  // std::max's choice, NaN included
  }
  const float d = amax / 127.f, id = d != 0 ? 1.f / d : 0.f;
  const uint16_t h = FloatToHalf(d);
  dst[0] = static_cast<uint8_t>(h & 0xff);
  dst[1] = static_cast<uint8_t>(h >> 8);
  for (int j = 0; j < 32; ++j) {
    dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(lroundf(x[j] * id)));
  }
}

}  // namespace moe
