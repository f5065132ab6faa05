// IEEE half and bfloat16 <-> float conversions (bit-exact, portable).
#pragma once

#include <cstdint>
#include <cstring>

#include "lib/base/host_device.h"

namespace moe {

MOE_HOST_DEVICE inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return FloatFromBits(bits);
}

// Round to nearest even, with overflow to infinity.
MOE_HOST_DEVICE inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000)
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds past 65504
  if (abs < 0x38800000) {                                              // subnormal or zero in half
    float a;
    std::memcpy(&a, &abs, 4);
    // Scale so the half subnormal unit becomes 1, then round to nearest even.
    float scaled = a * 16777216.0f;  // 2^24
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = abs & 0x7fffff;
  uint32_t exp = (abs >> 23) - 127 + 15;
  uint32_t h = exp << 10 | mant >> 13;
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// v as a little-endian half at dst: the f16 scales of the quantized block formats.
MOE_HOST_DEVICE inline void StoreHalf(float v, uint8_t* dst) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(dst, &h, 2);
}

MOE_HOST_DEVICE inline float Bf16ToFloat(uint16_t b) {
  return FloatFromBits(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace moe
