#include "lib/backend/cpu/kquant_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lib/base/half.h"

namespace moe {
namespace {

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
  StoreHalf(d, header);
  StoreHalf(dmin, header + 2);
  PackScaleMins(sc, mn, header + 4);
}

// A 16-value group's fit x ~ scale * q + offset with integer q in [qlo, qhi]: offset = 0 for the
// symmetric types, offset <= 0 for the affine ones (their minimums are stored unsigned).
struct GroupFit {
  float scale = 0;
  float offset = 0;
};

// The level of a value already divided by the scale: clamped to [qlo, qhi], then rounded to
// nearest (ties to even) by adding and subtracting 1.5 * 2^23 — min/max and two additions, no
// branch to mispredict on random weights in the fit's inner loop.
float Level(float scaled, int qlo, int qhi) {
  const float v = std::min(std::max(scaled, float(qlo)), float(qhi));
  return (v + 12582912.0f) - 12582912.0f;
}

// The level the fit gives v: the same rounding the fit was assessed with.
int QuantOf(float v, const GroupFit& f, int qlo, int qhi) {
  return f.scale != 0 ? static_cast<int>(Level((v - f.offset) / f.scale, qlo, qhi)) : 0;
}

// One pass over a group under fit f: its squared error, and the least-squares (scale, offset)
// for the assignment f makes, the offset held at 0 when `affine` is false or it would be > 0.
// The error comes from the sums the refit needs anyway (|x - s q - o|^2 expanded), with the
// group's own sums of x and x^2 computed once.
struct GroupSums {
  int n;
  double sx, sxx;
};

struct Assessment {
  double error = 0;
  GroupFit refit;
};

Assessment Assess(const float* x, const GroupSums& g, const GroupFit& f, int qlo, int qhi,
                  bool affine) {
  const float inv = 1.0f / f.scale;
  float sq = 0, sqq = 0, sxq = 0;  // sq and sqq are small integers, exact in float
  for (int i = 0; i < g.n; ++i) {
    const float q = Level((x[i] - f.offset) * inv, qlo, qhi);
    sq += q;
    sqq += q * q;
    sxq += x[i] * q;
  }
  const double s = f.scale, o = f.offset, n = g.n;
  Assessment a;
  a.error = g.sxx - 2 * s * sxq - 2 * o * g.sx + s * s * sqq + 2 * s * o * sq + n * o * o;
  if (affine) {
    const double det = n * sqq - static_cast<double>(sq) * sq;
    if (det > 0) {
      a.refit.scale = static_cast<float>((n * sxq - sq * g.sx) / det);
      a.refit.offset = static_cast<float>((g.sx - a.refit.scale * sq) / n);
    }
    if (a.refit.offset <= 0 && a.refit.scale > 0) return a;
    a.refit.offset = 0;
  }
  a.refit.scale = sqq > 0 ? sxq / sqq : 0;
  return a;
}

// The starting fits spread the range over [qlo, qhi] (for symmetric types, the value of largest
// magnitude at either end) and shrink it step by step, so that outliers may clip; each is then
// refined twice, and the fit of least squared error wins.
GroupFit BestGroupFit(const float* x, int n, int qlo, int qhi, bool affine) {
  float lo = 0, hi = 0, extreme = 0;
  GroupSums g{n, 0, 0};
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    g.sx += x[i];
    g.sxx += static_cast<double>(x[i]) * x[i];
  }
  GroupFit best;
  if (hi == lo) return best;
  double best_error = g.sxx;
  for (int step = 0; step < 4; ++step) {
    const float shrink = 1.0f - 0.1f * step;
    GroupFit starts[2];
    int n_starts = 1;
    if (affine) {
      starts[0] = {shrink * (hi - lo) / (qhi - qlo), shrink * lo};
    } else {
      starts[0] = {shrink * extreme / qlo, 0};
      starts[1] = {shrink * extreme / qhi, 0};
      n_starts = 2;
    }
    for (int s = 0; s < n_starts; ++s) {
      GroupFit f = starts[s];
      for (int round = 0; round < 3 && f.scale != 0; ++round) {
        const Assessment a = Assess(x, g, f, qlo, qhi, affine);
        if (a.error < best_error) {
          best_error = a.error;
          best = f;
        }
        f = a.refit;
      }
    }
  }
  return best;
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
  StoreHalf(d, b + 208);
}

void EncodeQ2_KBlock(const float* x, uint8_t* b) {
  // x = d * sc * q - dmin * m, q in [0, 3], sc and m 4-bit per 16 values.
  GroupFit fit[16];
  float max_scale = 0, max_min = 0;
  for (int g = 0; g < 16; ++g) {
    fit[g] = BestGroupFit(x + 16 * g, 16, 0, 3, /*affine=*/true);
    max_scale = std::max(max_scale, fit[g].scale);
    max_min = std::max(max_min, -fit[g].offset);
  }
  const float d = HalfToFloat(FloatToHalf(max_scale / 15));
  const float dmin = HalfToFloat(FloatToHalf(max_min / 15));
  std::memset(b, 0, 84);
  for (int g = 0; g < 16; ++g) {
    const int sc = d > 0 ? std::clamp(Nearest(fit[g].scale / d), 0, 15) : 0;
    const int m = dmin > 0 ? std::clamp(Nearest(-fit[g].offset / dmin), 0, 15) : 0;
    b[g] = static_cast<uint8_t>(sc | m << 4);
    const GroupFit stored{d * sc, -dmin * m};
    for (int l = 0; l < 16; ++l) {
      const int v = 16 * g + l;
      b[16 + 32 * (v / 128) + v % 32] |= QuantOf(x[v], stored, 0, 3) << (2 * (v / 32 % 4));
    }
  }
  StoreHalf(d, b + 80);
  StoreHalf(dmin, b + 82);
}

void EncodeQ3_KBlock(const float* x, uint8_t* b) {
  // x = d * sc * q, q in [-4, 3] (stored + 4), sc a signed 6-bit scale per 16 values.
  GroupFit fit[16];
  float max_scale = 0;
  for (int g = 0; g < 16; ++g) {
    fit[g] = BestGroupFit(x + 16 * g, 16, -4, 3, /*affine=*/false);
    max_scale = std::max(max_scale, std::fabs(fit[g].scale));
  }
  const float d = HalfToFloat(FloatToHalf(max_scale / 31));
  std::memset(b, 0, 110);
  uint8_t* scales = b + 96;
  for (int g = 0; g < 16; ++g) {
    const int sc = d > 0 ? std::clamp(Nearest(fit[g].scale / d), -32, 31) : 0;
    const int u = sc + 32;
    scales[g % 8] |= (u & 0x0f) << (g < 8 ? 0 : 4);
    scales[8 + g % 4] |= (u >> 4) << (2 * (g / 4));
    const GroupFit stored{d * sc, 0};
    for (int l = 0; l < 16; ++l) {
      const int v = 16 * g + l;
      const int q = QuantOf(x[v], stored, -4, 3) + 4;
      b[v % 32] |= (q >> 2) << (v / 32);
      b[32 + 32 * (v / 128) + v % 32] |= (q & 3) << (2 * (v / 32 % 4));
    }
  }
  StoreHalf(d, b + 108);
}

}  // namespace moe
