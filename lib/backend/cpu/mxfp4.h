// MXFP4 (OCP microscaling FP4, GGUF type 39) as ggml stores it: per 32 values one E8M0 scale
// byte, then 16 bytes of E2M1 codes (value j in the low nibble of byte j, value j + 16 in the
// high one).
#pragma once

#include <cstdint>
#include <cstring>

#include "lib/base/host_device.h"

namespace moe {

// Twice the E2M1 values of the 16 codes, so they are integers (ggml's kvalues_mxfp4): the
// integer kernels multiply them with 8-bit activations, and the scale is halved to match.
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// The same plus kMxfp4Zero, so they are unsigned (0..24) for the u8 x s8 instructions; the
// kernels take kMxfp4Zero times the activations' sum back off, as Q4_0's zero point.
inline constexpr int kMxfp4Zero = 12;
alignas(16) inline constexpr int8_t kMxfp4ShiftedValues[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                               12, 11, 10, 9,  8,  6,  4,  0};
constexpr bool ShiftedValuesAreValuesPlusZero() {
  for (int i = 0; i < 16; ++i) {
    if (kMxfp4ShiftedValues[i] != kMxfp4Values[i] + kMxfp4Zero) return false;
  }
  return true;
}
static_assert(ShiftedValuesAreValuesPlusZero());

// 2^(e - 128): the E8M0 scale halved (ggml's GGML_E8M0_TO_FP32_HALF, exact for every e,
// the two smallest as subnormals).
MOE_HOST_DEVICE inline float Mxfp4HalfScale(uint8_t e) {
  return FloatFromBits(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

// kMxfp4Values[code], also on a device (which cannot index a host constant array).
MOE_HOST_DEVICE constexpr int Mxfp4Value(int code) {
  constexpr int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return kValues[code];
}
constexpr bool Mxfp4ValueIsTheTable() {
  for (int i = 0; i < 16; ++i) {
    if (Mxfp4Value(i) != kMxfp4Values[i]) return false;
  }
  return true;
}
static_assert(Mxfp4ValueIsTheTable());

}  // namespace moe
