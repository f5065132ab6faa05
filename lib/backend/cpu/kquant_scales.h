// Unpacks the 6-bit scales of the K-quant super-blocks: (scale, min) pairs of Q4_K/Q5_K, the
// signed scales of Q3_K.
#pragma once

#include <cstdint>
#include <cstring>

#include "lib/base/host_device.h"

namespace moe {

MOE_HOST_DEVICE inline void UnpackScaleMins(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K's sixteen 6-bit scales (one per 16 values) from its 12 bytes, offset to [-32, 31]: the
// low four bits of scale i are byte i's low nibble (i < 8) or byte i-8's high nibble, the high
// two bits sit in byte 8 + i % 4 at bit 2 (i / 4). Four bytes at a time in 32-bit words (the
// kernels call this once per 256 values of every row).
MOE_HOST_DEVICE inline void UnpackQ3Scales(const uint8_t* s, int8_t sc[16]) {
  uint32_t a[3];
  std::memcpy(a, s, 12);
  constexpr uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4] = {
      (a[0] & kLow4) | (a[2] & kLow2) << 4,
      (a[1] & kLow4) | (a[2] >> 2 & kLow2) << 4,
      (a[0] >> 4 & kLow4) | (a[2] >> 4 & kLow2) << 4,
      (a[1] >> 4 & kLow4) | (a[2] >> 6 & kLow2) << 4,
  };
  // Each byte b in [0, 63] to b - 32 without borrows between bytes: b >= 32 clears bit 5;
  // b < 32 sets bits 5-7.
  for (uint32_t& w : u) {
    const uint32_t below = ~w & 0x20202020;
    w = (w ^ 0x20202020) | below << 1 | below << 2;
  }
  std::memcpy(sc, u, 16);
}

}  // namespace moe
