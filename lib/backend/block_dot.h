// Integer dot products of a quantized row with 8-bit activations (Q8Block), the reference
// semantics every SIMD kernel of the CPU backend is tested against: one definition that the CPU
// backend (ScalarQuantDot) and the CUDA kernels (kernels/) share, as block_decode.h is for
// decoding (issue 21's numeric core). n values, a multiple of the type's block.
#pragma once

#include <cstdint>

#include "lib/backend/block_decode.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/backend/cpu/q8_activations.h"
#include "lib/base/host_device.h"

namespace moe {

MOE_HOST_DEVICE inline float DotQ8_0Row(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 34) {
    const int8_t* q = reinterpret_cast<const int8_t*>(w + 2);
    int32_t acc = 0;
    for (int i = 0; i < 32; ++i) acc += q[i] * x[b].q[i];
    s += LoadHalf(w) * x[b].d * acc;
  }
  return s;
}

MOE_HOST_DEVICE inline float DotQ4_0Row(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 18) {
    int32_t acc = 0;
    for (int j = 0; j < 16; ++j) {
      acc += (w[2 + j] & 0x0f) * x[b].q[j] + (w[2 + j] >> 4) * x[b].q[j + 16];
    }
    acc -= 8 * (x[b].sum[0] + x[b].sum[1]);
    s += LoadHalf(w) * x[b].d * acc;
  }
  return s;
}

MOE_HOST_DEVICE inline float DotMXFP4Row(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 17) {
    int32_t acc = 0;
    for (int j = 0; j < 16; ++j) {
      acc += Mxfp4Value(w[1 + j] & 0x0f) * x[b].q[j] + Mxfp4Value(w[1 + j] >> 4) * x[b].q[j + 16];
    }
    s += Mxfp4HalfScale(w[0]) * x[b].d * acc;
  }
  return s;
}

// Q4_1 / Q5_1: x = d q + m, so a block's dot is d xd sum(q a) + m xd sum(a).
MOE_HOST_DEVICE inline float DotQ4_1Row(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 20) {
    int32_t acc = 0;
    for (int j = 0; j < 16; ++j) {
      acc += (w[4 + j] & 0x0f) * x[b].q[j] + (w[4 + j] >> 4) * x[b].q[j + 16];
    }
    s += LoadHalf(w) * x[b].d * acc + LoadHalf(w + 2) * x[b].d * (x[b].sum[0] + x[b].sum[1]);
  }
  return s;
}

MOE_HOST_DEVICE inline float DotQ5_0Row(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 22) {
    int32_t acc = 0;
    for (int j = 0; j < 32; ++j) acc += Quant5(w + 2, w + 6, j) * x[b].q[j];
    acc -= 16 * (x[b].sum[0] + x[b].sum[1]);
    s += LoadHalf(w) * x[b].d * acc;
  }
  return s;
}

MOE_HOST_DEVICE inline float DotQ5_1Row(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 24) {
    int32_t acc = 0;
    for (int j = 0; j < 32; ++j) acc += Quant5(w + 4, w + 8, j) * x[b].q[j];
    s += LoadHalf(w) * x[b].d * acc + LoadHalf(w + 2) * x[b].d * (x[b].sum[0] + x[b].sum[1]);
  }
  return s;
}

// The integer sum of one IQ4_NL block's 16 index bytes with an activation block.
MOE_HOST_DEVICE inline int32_t Iq4NlSum(const uint8_t* q, const Q8Block& a) {
  int32_t acc = 0;
  for (int j = 0; j < 16; ++j) {
    acc += Iq4nlValue(q[j] & 0x0f) * a.q[j] + Iq4nlValue(q[j] >> 4) * a.q[j + 16];
  }
  return acc;
}

MOE_HOST_DEVICE inline float DotIQ4_NLRow(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 18) s += LoadHalf(w) * x[b].d * Iq4NlSum(w + 2, x[b]);
  return s;
}

MOE_HOST_DEVICE inline float DotIQ4_XSRow(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 136, x += 8) {
    const float d = LoadHalf(w);
    for (int ib = 0; ib < 8; ++ib) {
      s += d * x[ib].d * Iq4xsScale(w, ib) * Iq4NlSum(w + 8 + 16 * ib, x[ib]);
    }
  }
  return s;
}

// Q2_K and Q3_K: one scale per 16 values, so each activation block's two halves (sum[0],
// sum[1]) meet different scales. Value v = 128 n + 32 j + l is bits 2j.. of qs[32 n + l].
MOE_HOST_DEVICE inline float DotQ2_KRow(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 84, x += 8) {
    const float d = LoadHalf(w + 80), dmin = LoadHalf(w + 82);
    for (int b = 0; b < 8; ++b) {
      const uint8_t* qs = w + 16 + 32 * (b / 4);
      const int shift = 2 * (b % 4);
      for (int h = 0; h < 2; ++h) {
        int32_t acc = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l) acc += ((qs[l] >> shift) & 3) * x[b].q[l];
        const uint8_t sc = w[2 * b + h];
        s += d * x[b].d * (sc & 0x0f) * acc - dmin * x[b].d * (sc >> 4) * x[b].sum[h];
      }
    }
  }
  return s;
}

MOE_HOST_DEVICE inline float DotQ3_KRow(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 110, x += 8) {
    const float d = LoadHalf(w + 108);
    int8_t sc[16];
    UnpackQ3Scales(w + 96, sc);
    for (int b = 0; b < 8; ++b) {
      const uint8_t* qs = w + 32 + 32 * (b / 4);
      const int shift = 2 * (b % 4);
      for (int h = 0; h < 2; ++h) {
        int32_t acc = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int q = ((qs[l] >> shift) & 3) | ((w[l] >> b) & 1) << 2;
          acc += q * x[b].q[l];
        }
        s += d * x[b].d * sc[2 * b + h] * (acc - 4 * x[b].sum[h]);
      }
    }
  }
  return s;
}

MOE_HOST_DEVICE inline float DotQ4_KRow(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 144, x += 8) {
    const float d = LoadHalf(w), dmin = LoadHalf(w + 2);
    uint8_t sc[8], mn[8];
    UnpackScaleMins(w + 4, sc, mn);
    const uint8_t* qs = w + 16;
    for (int k = 0; k < 4; ++k) {
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (qs[32 * k + l] & 0x0f) * x[2 * k].q[l];
        hi += (qs[32 * k + l] >> 4) * x[2 * k + 1].q[l];
      }
      const Q8Block& a = x[2 * k];
      const Q8Block& b = x[2 * k + 1];
      s += d * a.d * sc[2 * k] * lo - dmin * a.d * mn[2 * k] * (a.sum[0] + a.sum[1]);
      s += d * b.d * sc[2 * k + 1] * hi - dmin * b.d * mn[2 * k + 1] * (b.sum[0] + b.sum[1]);
    }
  }
  return s;
}

MOE_HOST_DEVICE inline float DotQ5_KRow(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 176, x += 8) {
    const float d = LoadHalf(w), dmin = LoadHalf(w + 2);
    uint8_t sc[8], mn[8];
    UnpackScaleMins(w + 4, sc, mn);
    const uint8_t* qh = w + 16;
    const uint8_t* qs = w + 48;
    for (int j = 0; j < 8; ++j) {
      int32_t acc = 0;
      for (int l = 0; l < 32; ++l) {
        int lowbits = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 0x0f;
        acc += (lowbits | ((qh[l] >> j) & 1) << 4) * x[j].q[l];
      }
      s += d * x[j].d * sc[j] * acc - dmin * x[j].d * mn[j] * (x[j].sum[0] + x[j].sum[1]);
    }
  }
  return s;
}

MOE_HOST_DEVICE inline float DotQ6_KRow(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 210, x += 8) {
    const float d = LoadHalf(w + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(w + 192);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w + 64 * half;
      const uint8_t* qh = w + 128 + 32 * half;
      const int8_t* sc = scales + 8 * half;
      for (int j = 0; j < 4; ++j) {
        const Q8Block& a = x[4 * half + j];
        int32_t acc[2] = {0, 0};
        for (int l = 0; l < 32; ++l) {
          int lowbits = (ql[l + (j % 2 ? 32 : 0)] >> (j >= 2 ? 4 : 0)) & 0x0f;
          int q = lowbits | ((qh[l] >> (2 * j)) & 3) << 4;
          acc[l / 16] += q * a.q[l];
        }
        for (int h = 0; h < 2; ++h) {
          s += d * a.d * sc[2 * j + h] * (acc[h] - 32 * a.sum[h]);
        }
      }
    }
  }
  return s;
}

// The dot of a row of the quantized file type t with n activations; false (and 0) for any
// other type.
MOE_HOST_DEVICE inline bool QuantDotRow(DType t, const uint8_t* w, const Q8Block* x, int64_t n,
                                        float* out) {
  switch (t) {
    case DType::kQ8_0:
      *out = DotQ8_0Row(w, x, n);
      return true;
    case DType::kQ4_0:
      *out = DotQ4_0Row(w, x, n);
      return true;
    case DType::kMXFP4:
      *out = DotMXFP4Row(w, x, n);
      return true;
    case DType::kQ2_K:
      *out = DotQ2_KRow(w, x, n);
      return true;
    case DType::kQ3_K:
      *out = DotQ3_KRow(w, x, n);
      return true;
    case DType::kQ4_K:
      *out = DotQ4_KRow(w, x, n);
      return true;
    case DType::kQ5_K:
      *out = DotQ5_KRow(w, x, n);
      return true;
    case DType::kQ6_K:
      *out = DotQ6_KRow(w, x, n);
      return true;
    case DType::kQ4_1:
      *out = DotQ4_1Row(w, x, n);
      return true;
    case DType::kQ5_0:
      *out = DotQ5_0Row(w, x, n);
      return true;
    case DType::kQ5_1:
      *out = DotQ5_1Row(w, x, n);
      return true;
    case DType::kIQ4_NL:
      *out = DotIQ4_NLRow(w, x, n);
      return true;
    case DType::kIQ4_XS:
      *out = DotIQ4_XSRow(w, x, n);
      return true;
    default:
      *out = 0;
      return false;
  }
}

}  // namespace moe
