// IQ4_NL's 16 values (GGUF types 20 and 23, IQ4_NL and IQ4_XS): a 4-bit index picks one of these
// non-uniformly spaced int8 levels, which the block's scale multiplies.
#pragma once

#include <cstdint>

#include "lib/base/host_device.h"

namespace moe {

alignas(16) inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};

// The same plus kIq4nlZero, so they are unsigned (1..241) for the u8 x s8 instructions; the
// group kernels take kIq4nlZero times the activations' sum back off.
inline constexpr int kIq4nlZero = 128;
alignas(16) inline constexpr uint8_t kIq4nlShiftedValues[16] = {
    1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
constexpr bool ShiftedIq4nlValuesAreValuesPlusZero() {
  for (int i = 0; i < 16; ++i) {
    if (kIq4nlShiftedValues[i] != kIq4nlValues[i] + kIq4nlZero) return false;
  }
  return true;
}
static_assert(ShiftedIq4nlValuesAreValuesPlusZero());

// kIq4nlValues[code], also on a device (which cannot index a host constant array).
MOE_HOST_DEVICE constexpr int Iq4nlValue(int code) {
  constexpr int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};
  return kValues[code];
}
constexpr bool Iq4nlValueIsTheTable() {
  for (int i = 0; i < 16; ++i) {
    if (Iq4nlValue(i) != kIq4nlValues[i]) return false;
  }
  return true;
}
static_assert(Iq4nlValueIsTheTable());

// The 6-bit scale of 32-value block ib (< 8) of an IQ4_XS super-block: its low four bits in
// scales_l (two blocks a byte, the even one low), its high two in the 16-bit scales_h.
MOE_HOST_DEVICE inline int Iq4xsScale(const uint8_t* super_block, int ib) {
  const int high = (super_block[2] | super_block[3] << 8) >> (2 * ib) & 3;
  const int low = super_block[4 + ib / 2] >> (4 * (ib % 2)) & 0x0f;
  return (low | high << 4) - 32;
}

}  // namespace moe
