#include "lib/backend/cpu/block32_encode.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "lib/base/half.h"

namespace moe {
namespace {

// The value of largest magnitude, with its sign (the first of equals): Q4_0 and Q5_0 map it
// onto their lowest level.
float SignedMaxMagnitude(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// The block's smallest and largest value (a minimum-offset fit spans them).
void Range(const float* x, float* lo, float* hi) {
  *lo = FLT_MAX;
  *hi = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    *lo = x[j] < *lo ? x[j] : *lo;
    *hi = x[j] > *hi ? x[j] : *hi;
  }
}

// 32 quants of up to 5 bits: the low nibbles as Q4_0's (element j in byte j % 16, low half for
// j < 16), the fifth bits as the little-endian 32-bit qh, bit j for element j.
void PackQuant5(const uint8_t q[32], uint8_t* qh, uint8_t* qs) {
  uint32_t high = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
    high |= static_cast<uint32_t>(q[j] >> 4 & 1) << j;
    high |= static_cast<uint32_t>(q[j + 16] >> 4 & 1) << (j + 16);
  }
  std::memcpy(qh, &high, 4);
}

// The minimum-offset fit of Q4_1 and Q5_1: d spans [min, max] in levels - 1 steps; d and the
// minimum go to dst as halves, the quants (x - min) / d, rounded half up and capped at the top
// level (x - min is never negative, so truncation rounds as ggml's casts do), to q.
void FitOffset(const float* x, int levels, uint8_t* dst, uint8_t q[32]) {
  float lo, hi;
  Range(x, &lo, &hi);
  const float d = (hi - lo) / (levels - 1), id = d != 0 ? 1.f / d : 0.f;
  StoreHalf(d, dst);
  StoreHalf(lo, dst + 2);
  for (int j = 0; j < 32; ++j) {
    const int v = static_cast<int8_t>((x[j] - lo) * id + 0.5f);
    q[j] = static_cast<uint8_t>(std::min(levels - 1, v));
  }
}

}  // namespace

void EncodeQ4_1Block(const float* x, uint8_t* dst) {
  uint8_t q[32];
  FitOffset(x, 16, dst, q);
  for (int j = 0; j < 16; ++j) dst[4 + j] = static_cast<uint8_t>(q[j] | q[j + 16] << 4);
}

void EncodeQ4_0Block(const float* x, uint8_t* dst) {
  const float d = SignedMaxMagnitude(x) / -8.f, id = d != 0 ? 1.f / d : 0.f;
  StoreHalf(d, dst);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    dst[2 + j] = static_cast<uint8_t>(q0 | q1 << 4);
  }
}

void EncodeQ5_0Block(const float* x, uint8_t* dst) {
  const float d = SignedMaxMagnitude(x) / -16, id = d != 0 ? 1.f / d : 0.f;
  StoreHalf(d, dst);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    q[j] = static_cast<uint8_t>(
        std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
  }
  PackQuant5(q, dst + 2, dst + 6);
}

void EncodeQ5_1Block(const float* x, uint8_t* dst) {
  uint8_t q[32];
  FitOffset(x, 32, dst, q);
  PackQuant5(q, dst + 4, dst + 8);
}

}  // namespace moe
