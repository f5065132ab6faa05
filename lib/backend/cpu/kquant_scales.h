// Unpacks the 6-bit (scale, min) pairs of Q4_K/Q5_K super-blocks.
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

}  // namespace moe
