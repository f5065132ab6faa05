// The quantized blocks as GGUF defines them, decoded to floats: the one definition the CPU
// backend (DequantizeRow) and the CUDA kernels (kernels/) share, so that the GPU decodes every
// block bit for bit as the CPU does (issue 21's numeric core). Nothing here may need the host:
// no tables at namespace scope, no library calls but memcpy.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/iq4nl.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/base/dtype_enum.h"
#include "lib/base/half.h"
#include "lib/base/host_device.h"

namespace moe {

MOE_HOST_DEVICE inline float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }

// Q8_0: f16 scale d, then 32 int8 q; x = d * q.
MOE_HOST_DEVICE inline void DecodeQ8_0Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * q[i];
}

// Q4_0: f16 scale d, then 16 bytes; element j is the low nibble of byte j, element j+16 the
// high nibble; x = d * (q - 8).
MOE_HOST_DEVICE inline void DecodeQ4_0Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((q[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
  }
}

// MXFP4: scale byte e (E8M0), then 16 bytes; element j is the low nibble of byte j, element
// j+16 the high nibble; x = kMxfp4Values[code] * 2^(e - 128) (the table holds twice the E2M1
// values, so the scale is halved: llama.cpp's GGML_E8M0_TO_FP32_HALF).
MOE_HOST_DEVICE inline void DecodeMxfp4Block(const uint8_t* b, float* y) {
  const float d = Mxfp4HalfScale(b[0]);
  const uint8_t* q = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(Mxfp4Value(q[j] & 0x0f));
    y[j + 16] = d * static_cast<float>(Mxfp4Value(q[j] >> 4));
  }
}

// Q4_1: f16 d, f16 m, then Q4_0's 16 bytes of nibbles; x = d * q + m.
MOE_HOST_DEVICE inline void DecodeQ4_1Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), m = LoadHalf(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(q[j] & 0x0f) + m;
    y[j + 16] = d * static_cast<float>(q[j] >> 4) + m;
  }
}

// Q5_0 / Q5_1's 5-bit quant of element j (< 32): the nibble as Q4_0's, the fifth bit bit j of
// the little-endian 32-bit qh.
MOE_HOST_DEVICE inline int Quant5(const uint8_t* qh, const uint8_t* qs, int j) {
  const int nibble = j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
  return nibble | ((qh[j / 8] >> (j % 8)) & 1) << 4;
}

// Q5_0: f16 d, 4 bytes qh, 16 bytes of nibbles; x = d * (q - 16).
MOE_HOST_DEVICE inline void DecodeQ5_0Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(Quant5(b + 2, b + 6, j) - 16);
}

// Q5_1: f16 d, f16 m, 4 bytes qh, 16 bytes of nibbles; x = d * q + m.
MOE_HOST_DEVICE inline void DecodeQ5_1Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), m = LoadHalf(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(Quant5(b + 4, b + 8, j)) + m;
}

// IQ4_NL: f16 d, 16 bytes of indices (element j low nibble of byte j, j + 16 the high one).
MOE_HOST_DEVICE inline void DecodeIq4NlBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(Iq4nlValue(b[2 + j] & 0x0f));
    y[j + 16] = d * static_cast<float>(Iq4nlValue(b[2 + j] >> 4));
  }
}

// IQ4_XS: f16 d, u16 scales_h, 4 bytes scales_l, then per 32-value block 16 bytes of IQ4_NL
// indices; x = d * scale * table[q] with the block's 6-bit scale less 32.
MOE_HOST_DEVICE inline void DecodeIq4XsBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float dl = d * static_cast<float>(Iq4xsScale(b, ib));
    const uint8_t* q = b + 8 + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(Iq4nlValue(q[j] & 0x0f));
      y[j + 16] = dl * static_cast<float>(Iq4nlValue(q[j] >> 4));
    }
  }
}

// Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles; 8 sub-blocks of 32,
// x = d*sc*q - dmin*m.
MOE_HOST_DEVICE inline void DecodeQ4_KBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  uint8_t sc[8], mn[8];
  UnpackScaleMins(b + 4, sc, mn);
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    const float d1 = d * sc[is], m1 = dmin * mn[is];
    const float d2 = d * sc[is + 1], m2 = dmin * mn[is + 1];
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * (q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * (q[l] >> 4) - m2;
  }
}

// Q5_K: like Q4_K plus a fifth bit per element in 32 qh bytes.
MOE_HOST_DEVICE inline void DecodeQ5_KBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  uint8_t sc[8], mn[8];
  UnpackScaleMins(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    const float d1 = d * sc[is], m1 = dmin * mn[is];
    const float d2 = d * sc[is + 1], m2 = dmin * mn[is + 1];
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * ((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
  }
}

// Q6_K: 128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, f16 d; x = d*sc*(q-32).
MOE_HOST_DEVICE inline void DecodeQ6_KBlock(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadHalf(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0 & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2 & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
      y[n + l] = d * sc[is] * q1;
      y[n + l + 32] = d * sc[is + 2] * q2;
      y[n + l + 64] = d * sc[is + 4] * q3;
      y[n + l + 96] = d * sc[is + 6] * q4;
    }
  }
}

// Q2_K: 16 bytes of (scale | min << 4), 64 bytes of 2-bit quants, f16 d, f16 dmin. Value
// v = 128 n + 32 j + l (l < 32) is bits 2j.. of qs[32 n + l]; x = d*sc - dmin*m per 16 values.
MOE_HOST_DEVICE inline void DecodeQ2_KBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b + 80), dmin = LoadHalf(b + 82);
  for (int v = 0; v < 256; ++v) {
    const uint8_t sc = b[v / 16];
    const int q = (b[16 + 32 * (v / 128) + v % 32] >> (2 * (v / 32 % 4))) & 3;
    y[v] = d * (sc & 0x0f) * q - dmin * (sc >> 4);
  }
}

// Q3_K: 32 bytes of high bits (value v's in hmask[v % 32] at bit v / 32), 64 bytes of 2-bit low
// parts (as Q2_K's), 12 bytes of 6-bit scales, f16 d; x = d*(sc-32)*(q - 4) with q in [0, 7].
MOE_HOST_DEVICE inline void DecodeQ3_KBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b + 108);
  int8_t sc[16];
  UnpackQ3Scales(b + 96, sc);
  for (int v = 0; v < 256; ++v) {
    const int low = (b[32 + 32 * (v / 128) + v % 32] >> (2 * (v / 32 % 4))) & 3;
    const int high = (b[v % 32] >> (v / 32)) & 1;
    y[v] = d * sc[v / 16] * ((low | high << 2) - 4);
  }
}

// The quantized file types' blocks: values and bytes per block (0 and 0 for any other type; the
// same numbers as GetDTypeInfo, which a test checks).
struct BlockShape {
  int elems = 0, bytes = 0;
};
MOE_HOST_DEVICE constexpr BlockShape QuantBlockShape(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return {32, 34};
    case DType::kQ4_0:
      return {32, 18};
    case DType::kMXFP4:
      return {32, 17};
    case DType::kQ4_K:
      return {256, 144};
    case DType::kQ5_K:
      return {256, 176};
    case DType::kQ6_K:
      return {256, 210};
    case DType::kQ2_K:
      return {256, 84};
    case DType::kQ3_K:
      return {256, 110};
    case DType::kQ4_1:
      return {32, 20};
    case DType::kQ5_0:
      return {32, 22};
    case DType::kQ5_1:
      return {32, 24};
    case DType::kIQ4_NL:
      return {32, 18};
    case DType::kIQ4_XS:
      return {256, 136};
    default:
      return {};
  }
}

// Decodes one block of a quantized file type into QuantBlockShape(t).elems floats; false (and
// nothing written) for any other type.
MOE_HOST_DEVICE inline bool DecodeQuantBlock(DType t, const uint8_t* b, float* y) {
  switch (t) {
    case DType::kQ8_0:
      DecodeQ8_0Block(b, y);
      return true;
    case DType::kQ4_0:
      DecodeQ4_0Block(b, y);
      return true;
    case DType::kMXFP4:
      DecodeMxfp4Block(b, y);
      return true;
    case DType::kQ4_K:
      DecodeQ4_KBlock(b, y);
      return true;
    case DType::kQ5_K:
      DecodeQ5_KBlock(b, y);
      return true;
    case DType::kQ6_K:
      DecodeQ6_KBlock(b, y);
      return true;
    case DType::kQ2_K:
      DecodeQ2_KBlock(b, y);
      return true;
    case DType::kQ3_K:
      DecodeQ3_KBlock(b, y);
      return true;
    case DType::kQ4_1:
      DecodeQ4_1Block(b, y);
      return true;
    case DType::kQ5_0:
      DecodeQ5_0Block(b, y);
      return true;
    case DType::kQ5_1:
      DecodeQ5_1Block(b, y);
      return true;
    case DType::kIQ4_NL:
      DecodeIq4NlBlock(b, y);
      return true;
    case DType::kIQ4_XS:
      DecodeIq4XsBlock(b, y);
      return true;
    default:
      return false;
  }
}

// Block `index` of a row-major matrix of `cols`-value rows of type t (blocks numbered row after
// row), decoded into its place in the float matrix dst: what one GPU thread does (kernels/), and
// what a host loop over every index must agree with DequantizeRow on. False for a type or a row
// length without whole blocks.
MOE_HOST_DEVICE inline bool DecodeBlockAt(DType t, const uint8_t* src, float* dst, int64_t cols,
                                          int64_t index) {
  const BlockShape s = QuantBlockShape(t);
  if (s.elems == 0 || cols % s.elems != 0) return false;
  const int64_t per_row = cols / s.elems;
  const int64_t row = index / per_row, block = index % per_row;
  return DecodeQuantBlock(t, src + (row * per_row + block) * s.bytes,
                          dst + row * cols + block * s.elems);
}

}  // namespace moe
