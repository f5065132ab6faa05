#include "lib/backend/cpu/kquant_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lib/base/half.h"

namespace moe {
namespace {

void PutHalf(uint8_t* p, float v) {
  uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

int Nearest(float v) { return static_cast<int>(std::lround(v)); }

// Packs eight 6-bit (scale, min) pairs into the 12 bytes Q4_K/Q5_K use.
void PackScaleMins(const int sc[8], const int mn[8], uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = sc[j];
    s[j + 4] = mn[j];
  }
  for (int j = 4; j < 8; ++j) {
    s[j + 4] = (sc[j] & 0xf) | ((mn[j] & 0xf) << 4);
    s[j - 4] |= (sc[j] >> 4) << 6;
    s[j] |= (mn[j] >> 4) << 6;
  }
}

// Fits x = d*sc*q - dmin*m with q in [0, qmax] per 32-element sub-block; returns the quants and
// writes d, dmin, the packed scales.
void FitAffine(const float* x, int qmax, uint8_t* header, int q[256]) {
  float scale[8], neg_min[8];
  for (int j = 0; j < 8; ++j) {
    float lo = 0, hi = 0;  // the range always includes 0, as ggml's fits do
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi = std::max(hi, x[32 * j + l]);
    }
    scale[j] = (hi - lo) / qmax;
    neg_min[j] = -lo;
  }
  float max_scale = *std::max_element(scale, scale + 8);
  float max_min = *std::max_element(neg_min, neg_min + 8);
  float d = max_scale / 63, dmin = max_min / 63;
  // Round d and dmin to half first: the decoder sees the rounded values.
  d = HalfToFloat(FloatToHalf(d));
  dmin = HalfToFloat(FloatToHalf(dmin));
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? std::clamp(Nearest(scale[j] / d), 0, 63) : 0;
    mn[j] = dmin > 0 ? std::clamp(Nearest(neg_min[j] / dmin), 0, 63) : 0;
    float step = d * sc[j], offset = dmin * mn[j];
    for (int l = 0; l < 32; ++l) {
      q[32 * j + l] = step > 0 ? std::clamp(Nearest((x[32 * j + l] + offset) / step), 0, qmax) : 0;
    }
  }
  PutHalf(header, d);
  PutHalf(header + 2, dmin);
  PackScaleMins(sc, mn, header + 4);
}

}  // namespace

void EncodeQ4_KBlock(const float* x, uint8_t* b) {
  int q[256];
  FitAffine(x, 15, b, q);
  uint8_t* qs = b + 16;
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) qs[32 * k + l] = q[64 * k + l] | q[64 * k + 32 + l] << 4;
  }
}

void EncodeQ5_KBlock(const float* x, uint8_t* b) {
  int q[256];
  FitAffine(x, 31, b, q);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32);
  for (int i = 0; i < 256; ++i) {
    if (q[i] & 16) qh[i % 32] |= 1 << (i / 32);
  }
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l)
      qs[32 * k + l] = (q[64 * k + l] & 15) | (q[64 * k + 32 + l] & 15) << 4;
  }
}

void EncodeQ6_KBlock(const float* x, uint8_t* b) {
  // x = d * sc * (q - 32), q in [0, 63], one int8 scale per 16 elements.
  float scale[16];
  for (int j = 0; j < 16; ++j) {
    float amax = 0, v = 0;
    for (int l = 0; l < 16; ++l) {
      if (std::fabs(x[16 * j + l]) > amax) {
        amax = std::fabs(x[16 * j + l]);
        v = x[16 * j + l];
      }
    }
    scale[j] = v / -32;  // the extreme value maps to q = 0 exactly
  }
  float amax_scale = 0;
  for (float s : scale) amax_scale = std::max(amax_scale, std::fabs(s));
  float d = HalfToFloat(FloatToHalf(amax_scale / 127));
  int8_t sc[16];
  int q[256];
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int8_t>(d > 0 ? std::clamp(Nearest(scale[j] / d), -127, 127) : 0);
    float step = d * sc[j];
    for (int l = 0; l < 16; ++l) {
      q[16 * j + l] = step != 0 ? std::clamp(Nearest(x[16 * j + l] / step) + 32, 0, 63) : 32;
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  std::memset(b, 0, 192);
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        int v = q[n * 128 + j * 32 + l];
        ql[n * 64 + l + (j % 2 ? 32 : 0)] |= (v & 15) << (j >= 2 ? 4 : 0);
        qh[n * 32 + l] |= (v >> 4) << (2 * j);
      }
    }
  }
  std::memcpy(b + 192, sc, 16);
  PutHalf(b + 208, d);
}

}  // namespace moe
