#include "lib/backend/cpu/iq4_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lib/backend/cpu/iq4nl.h"
#include "lib/base/half.h"

namespace moe {
namespace {

// The index of the level nearest v (levels ascend).
int NearestLevel(float v) {
  int best = 0;
  for (int i = 1; i < 16; ++i) {
    if (std::fabs(v - kIq4nlValues[i]) < std::fabs(v - kIq4nlValues[best])) best = i;
  }
  return best;
}

// The scale of 32 values: the largest magnitude onto the level -127 (with its sign), the
// indices for it, then the least-squares scale for those indices.
float FitBlock(const float* x, uint8_t q[32]) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0) {
    std::fill(q, q + 32, static_cast<uint8_t>(NearestLevel(0)));
    return 0;
  }
  const float d = max / kIq4nlValues[0];
  double xv = 0, vv = 0;
  for (int j = 0; j < 32; ++j) {
    q[j] = static_cast<uint8_t>(NearestLevel(x[j] / d));
    xv += static_cast<double>(x[j]) * kIq4nlValues[q[j]];
    vv += static_cast<double>(kIq4nlValues[q[j]]) * kIq4nlValues[q[j]];
  }
  return vv > 0 ? static_cast<float>(xv / vv) : d;
}

void PackIndices(const uint8_t q[32], uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | q[j + 16] << 4);
}

}  // namespace

void EncodeIq4NlBlock(const float* x, uint8_t* dst) {
  uint8_t q[32];
  StoreHalf(FitBlock(x, q), dst);
  PackIndices(q, dst + 2);
}

void EncodeIq4XsBlock(const float* x, uint8_t* dst) {
  // Each block's own scale first; the super-block's d spreads them over the 6-bit range
  // [-32, 31], then every block takes its indices again for the scale it can have.
  float block_scale[8], amax = 0, max = 0;
  uint8_t q[32];
  for (int ib = 0; ib < 8; ++ib) {
    block_scale[ib] = FitBlock(x + 32 * ib, q);
    if (std::fabs(block_scale[ib]) > amax) {
      amax = std::fabs(block_scale[ib]);
      max = block_scale[ib];
    }
  }
  const float d = max / -32, id = d != 0 ? 1.f / d : 0.f;
  StoreHalf(d, dst);
  const float d_stored = HalfToFloat(FloatToHalf(d));
  uint16_t scales_h = 0;
  std::memset(dst + 4, 0, 4);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = std::clamp(static_cast<int>(std::lround(block_scale[ib] * id)), -32, 31) + 32;
    scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
    dst[4 + ib / 2] |= static_cast<uint8_t>((ls & 0x0f) << (4 * (ib % 2)));
    const float dl = d_stored * (ls - 32);
    for (int j = 0; j < 32; ++j) {
      q[j] = static_cast<uint8_t>(dl != 0 ? NearestLevel(x[32 * ib + j] / dl) : NearestLevel(0));
    }
    PackIndices(q, dst + 8 + 16 * ib);
  }
  std::memcpy(dst + 2, &scales_h, 2);
}

}  // namespace moe
