// Portable kernels: the reference semantics of every SIMD path.
#include <cstring>

#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/base/half.h"

namespace moe::kernels {
namespace {

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

float DotQ8_0(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 34) {
    const int8_t* q = reinterpret_cast<const int8_t*>(w + 2);
    int32_t acc = 0;
    for (int i = 0; i < 32; ++i) acc += q[i] * x[b].q[i];
    s += Half(w) * x[b].d * acc;
  }
  return s;
}

float DotQ4_0(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 18) {
    int32_t acc = 0;
    for (int j = 0; j < 16; ++j) {
      acc += (w[2 + j] & 0x0f) * x[b].q[j] + (w[2 + j] >> 4) * x[b].q[j + 16];
    }
    acc -= 8 * (x[b].sum[0] + x[b].sum[1]);
    s += Half(w) * x[b].d * acc;
  }
  return s;
}

float DotMXFP4(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 17) {
    int32_t acc = 0;
    for (int j = 0; j < 16; ++j) {
      acc +=
          kMxfp4Values[w[1 + j] & 0x0f] * x[b].q[j] + kMxfp4Values[w[1 + j] >> 4] * x[b].q[j + 16];
    }
    s += Mxfp4HalfScale(w[0]) * x[b].d * acc;
  }
  return s;
}

// Q2_K and Q3_K: one scale per 16 values, so each activation block's two halves (sum[0],
// sum[1]) meet different scales. Value v = 128 n + 32 j + l is bits 2j.. of qs[32 n + l].
float DotQ2_K(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 84, x += 8) {
    const float d = Half(w + 80), dmin = Half(w + 82);
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

float DotQ3_K(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 110, x += 8) {
    const float d = Half(w + 108);
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

float DotQ4_K(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 144, x += 8) {
    const float d = Half(w), dmin = Half(w + 2);
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

float DotQ5_K(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 176, x += 8) {
    const float d = Half(w), dmin = Half(w + 2);
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

float DotQ6_K(const uint8_t* w, const Q8Block* x, int64_t n) {
  float s = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb, w += 210, x += 8) {
    const float d = Half(w + 208);
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

// The run-time layouts (repack.h): quants first, f16 scales after them.
float DotQ8_0R(const uint8_t* w, const Q8Block* x, int64_t n) {
  const int64_t nb = n / 32;
  const int8_t* q = reinterpret_cast<const int8_t*>(w);
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (int i = 0; i < 32; ++i) acc += q[32 * b + i] * x[b].q[i];
    s += Half(w + 32 * nb + 2 * b) * x[b].d * acc;
  }
  return s;
}

float DotQ4_0R(const uint8_t* w, const Q8Block* x, int64_t n) {
  const int64_t nb = n / 32;
  float s = 0;
  for (int64_t g = 0; g < nb / 4; ++g) {
    int32_t acc[4] = {0, 0, 0, 0};
    for (int e = 0; e < 128; ++e) {
      const uint8_t byte = w[64 * g + e % 64];
      const int q = e < 64 ? byte & 0x0f : byte >> 4;
      acc[e / 32] += q * x[4 * g + e / 32].q[e % 32];
    }
    for (int k = 0; k < 4; ++k) {
      const Q8Block& a = x[4 * g + k];
      s += Half(w + 16 * nb + 2 * (4 * g + k)) * a.d * (acc[k] - 8 * (a.sum[0] + a.sum[1]));
    }
  }
  return s;
}

float DotF32(const uint8_t* w, const float* x, int64_t n) {
  const float* v = reinterpret_cast<const float*>(w);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i] * x[i];
  return s;
}

float DotF16(const uint8_t* w, const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += Half(w + 2 * i) * x[i];
  return s;
}

float DotBF16(const uint8_t* w, const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, w + 2 * i, 2);
    s += Bf16ToFloat(b) * x[i];
  }
  return s;
}

}  // namespace

QuantDotFn ScalarQuantDot(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return DotQ8_0;
    case DType::kQ4_0:
      return DotQ4_0;
    case DType::kQ2_K:
      return DotQ2_K;
    case DType::kQ3_K:
      return DotQ3_K;
    case DType::kQ4_K:
      return DotQ4_K;
    case DType::kQ5_K:
      return DotQ5_K;
    case DType::kQ6_K:
      return DotQ6_K;
    case DType::kMXFP4:
      return DotMXFP4;
    case DType::kQ8_0R:
      return DotQ8_0R;
    case DType::kQ4_0R:
      return DotQ4_0R;
    default:
      return nullptr;
  }
}

FloatDotFn ScalarFloatDot(DType t) {
  switch (t) {
    case DType::kF32:
      return DotF32;
    case DType::kF16:
      return DotF16;
    case DType::kBF16:
      return DotBF16;
    default:
      return nullptr;
  }
}

}  // namespace moe::kernels
