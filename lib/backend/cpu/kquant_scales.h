// Unpacks the 6-bit scales of the K-quant super-blocks: (scale, min) pairs of Q4_K/Q5_K, the
// signed scales of Q3_K.
#pragma once

#include <cstdint>

namespace moe {

inline void UnpackScaleMins(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
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
// two bits sit in byte 8 + i % 4 at bit 2 (i / 4).
inline void UnpackQ3Scales(const uint8_t* s, int8_t sc[16]) {
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? s[i] & 0x0f : s[i - 8] >> 4;
    const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    sc[i] = static_cast<int8_t>((low | high << 4) - 32);
  }
}

}  // namespace moe
