#include "lib/backend/cpu/quant_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/dequant_kernels.h"
#include "lib/backend/cpu/kquant_encode.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/backend/cpu/repack.h"
#include "lib/backend/cpu/target_clones.h"
#include "lib/base/half.h"

namespace moe {
namespace {

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }

// Q8_0: f16 scale d, then 32 int8 q; x = d * q.
void DequantQ8_0(const uint8_t* b, float* y) {
  float d = LoadHalf(b);
  const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * q[i];
}

// Q4_0: f16 scale d, then 16 bytes; element j is the low nibble of byte j, element j+16 the
// high nibble; x = d * (q - 8).
void DequantQ4_0(const uint8_t* b, float* y) {
  float d = LoadHalf(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((q[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
  }
}

// MXFP4: scale byte e (E8M0), then 16 bytes; element j is the low nibble of byte j, element
// j+16 the high nibble; x = kMxfp4Values[code] * 2^(e - 128) (the table holds twice the E2M1
// values, so the scale is halved: llama.cpp's GGML_E8M0_TO_FP32_HALF).
void DequantMXFP4(const uint8_t* b, float* y) {
  const float d = Mxfp4HalfScale(b[0]);
  const uint8_t* q = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kMxfp4Values[q[j] & 0x0f];
    y[j + 16] = d * kMxfp4Values[q[j] >> 4];
  }
}

// As ggml's reference quantizer: the scale is 2^(floor(log2 amax) - 2) (so amax lands on the
// codes 4..6 of E2M1), and each value takes the nearest code, the first of equals.
void EncodeMxfp4Block(const float* x, uint8_t* out) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const uint8_t e =
      amax > 0 ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : uint8_t{0};
  const float d = Mxfp4HalfScale(e);
  auto nearest = [d](float v) {
    int best = 0;
    float best_err = std::fabs(kMxfp4Values[0] * d - v);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(kMxfp4Values[i] * d - v);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    return best;
  };
  out[0] = e;
  for (int j = 0; j < 16; ++j) {
    out[1 + j] = static_cast<uint8_t>(nearest(x[j]) | nearest(x[j + 16]) << 4);
  }
}

// The 12 scale bytes of Q4_K/Q5_K hold eight 6-bit (scale, min) pairs.
void ScaleMinK4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles; 8 sub-blocks of 32,
// x = d*sc*q - dmin*m.
void DequantQ4_K(const uint8_t* b, float* y) {
  float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * (q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * (q[l] >> 4) - m2;
  }
}

// Q5_K: like Q4_K plus a fifth bit per element in 32 qh bytes.
void DequantQ5_K(const uint8_t* b, float* y) {
  float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * ((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
  }
}

// Q6_K: 128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, f16 d; x = d*sc*(q-32).
void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = LoadHalf(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      int is = l / 16;
      int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0 & 3) << 4)) - 32;
      int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2 & 3) << 4)) - 32;
      int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
      int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
      y[n + l] = d * sc[is] * q1;
      y[n + l + 32] = d * sc[is + 2] * q2;
      y[n + l + 64] = d * sc[is + 4] * q3;
      y[n + l + 96] = d * sc[is + 6] * q4;
    }
  }
}

// Q2_K: 16 bytes of (scale | min << 4), 64 bytes of 2-bit quants, f16 d, f16 dmin. Value
// v = 128 n + 32 j + l (l < 32) is bits 2j.. of qs[32 n + l]; x = d*sc - dmin*m per 16 values.
void DequantQ2_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b + 80), dmin = LoadHalf(b + 82);
  for (int v = 0; v < 256; ++v) {
    const uint8_t sc = b[v / 16];
    const int q = (b[16 + 32 * (v / 128) + v % 32] >> (2 * (v / 32 % 4))) & 3;
    y[v] = d * (sc & 0x0f) * q - dmin * (sc >> 4);
  }
}

// Q3_K: 32 bytes of high bits (value v's in hmask[v % 32] at bit v / 32), 64 bytes of 2-bit low
// parts (as Q2_K's), 12 bytes of 6-bit scales, f16 d; x = d*(sc-32)*(q - 4) with q in [0, 7].
void DequantQ3_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b + 108);
  int8_t sc[16];
  UnpackQ3Scales(b + 96, sc);
  for (int v = 0; v < 256; ++v) {
    const int low = (b[32 + 32 * (v / 128) + v % 32] >> (2 * (v / 32 % 4))) & 3;
    const int high = (b[v % 32] >> (v / 32)) & 1;
    y[v] = d * sc[v / 16] * ((low | high << 2) - 4);
  }
}

__attribute__((target("avx2,f16c"))) void HalfsToFloatsF16c(const uint8_t* src, float* dst,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(
        dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  }
  for (; i < n; ++i) dst[i] = LoadHalf(src + 2 * i);
}

// F16 rows (the F16 KV cache, F16 weights in exact mode): the F16C conversion where the CPU
// has it.
void HalfsToFloats(const uint8_t* src, float* dst, int64_t n) {
  static const bool f16c = CpuHasF16c() && __builtin_cpu_supports("avx2");
  if (f16c) {
    HalfsToFloatsF16c(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadHalf(src + 2 * i);
}

using BlockDequant = void (*)(const uint8_t*, float*);

BlockDequant BlockDequantFor(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return DequantQ8_0;
    case DType::kQ4_0:
      return DequantQ4_0;
    case DType::kQ2_K:
      return DequantQ2_K;
    case DType::kQ3_K:
      return DequantQ3_K;
    case DType::kQ4_K:
      return DequantQ4_K;
    case DType::kQ5_K:
      return DequantQ5_K;
    case DType::kQ6_K:
      return DequantQ6_K;
    case DType::kMXFP4:
      return DequantMXFP4;
    default:
      return nullptr;
  }
}

// Compiled for several ISAs; the loader picks the best the CPU has at run time.
MOE_TARGET_CLONES("avx512f", "avx2", "default")
float DotF32(const float* a, const float* b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void DequantizeRow(DType t, const uint8_t* row, float* dst, int64_t n) {
  if (ActiveSimdLevel() >= SimdLevel::kAvx512) {
    if (DequantRowFn f = kernels::Avx512DequantRow(t)) {
      f(row, dst, n);
      return;
    }
  }
  if (IsRuntimeLayout(t)) {
    DequantizeRepackedRow(t, row, dst, n);
    return;
  }
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, row, n * sizeof(float));
      return;
    case DType::kF16:
      HalfsToFloats(row, dst, n);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(LoadU16(row + 2 * i));
      return;
    default: {
      const DTypeInfo& info = GetDTypeInfo(t);
      BlockDequant f = BlockDequantFor(t);
      for (int64_t i = 0; i < n; i += info.block_elems, row += info.block_bytes) f(row, dst + i);
    }
  }
}

void DequantizeWeightRow(const WeightView& w, int64_t r, float* dst) {
  if (RowGroup(w.dtype) > 1) {
    const int64_t first = r / kGroupRows * kGroupRows;
    DequantizeGroupRow(w.dtype, w.row(first), static_cast<int>(r - first), dst, w.cols);
  } else {
    DequantizeRow(w.dtype, w.row(r), dst, w.cols);
  }
}

float DotRow(DType t, const uint8_t* row, const float* x, int64_t n) {
  if (t == DType::kF32) return DotF32(reinterpret_cast<const float*>(row), x, n);
  if (IsRuntimeLayout(t)) {  // whole-row layouts: no chunks
    std::vector<float> buf(n);
    DequantizeRepackedRow(t, row, buf.data(), n);
    return DotF32(buf.data(), x, n);
  }
  // Dequantize a chunk at a time into a cache-resident buffer, then dot.
  constexpr int64_t kChunk = 256;
  alignas(64) float buf[kChunk];
  const DTypeInfo& info = GetDTypeInfo(t);
  int64_t chunk = std::max<int64_t>(info.block_elems, kChunk);
  float s = 0;
  for (int64_t i = 0; i < n; i += chunk) {
    int64_t len = std::min(chunk, n - i);
    DequantizeRow(t, row + RowBytes(t, i), buf, len);
    s += DotF32(buf, x + i, len);
  }
  return s;
}

absl::Status QuantizeRow(DType t, const float* src, uint8_t* dst, int64_t n) {
  if (const int block = GetDTypeInfo(t).block_elems; n % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a row of ", n, " values is not a whole number of ", DTypeName(t), " blocks of ", block));
  }
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return absl::OkStatus();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = FloatToHalf(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return absl::OkStatus();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = FloatToBf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return absl::OkStatus();
    case DType::kQ8_0:
      // As ggml's reference: d = max|x| / 127, q = round(x / d).
      for (int64_t i = 0; i < n; i += 32, dst += 34) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[i + j]));
        float d = amax / 127.f, id = d != 0 ? 1.f / d : 0.f;
        uint16_t h = FloatToHalf(d);
        std::memcpy(dst, &h, 2);
        for (int j = 0; j < 32; ++j) {
          dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(src[i + j] * id)));
        }
      }
      return absl::OkStatus();
    case DType::kQ4_0:
      // As ggml's reference: d = (signed max-magnitude value) / -8, q = clamp(x/d + 8.5, 0, 15).
      for (int64_t i = 0; i < n; i += 32, dst += 18) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(src[i + j]) > amax) {
            amax = std::fabs(src[i + j]);
            max = src[i + j];
          }
        }
        float d = max / -8.f, id = d != 0 ? 1.f / d : 0.f;
        uint16_t h = FloatToHalf(d);
        std::memcpy(dst, &h, 2);
        for (int j = 0; j < 16; ++j) {
          int q0 = std::min(15, static_cast<int>(src[i + j] * id + 8.5f));
          int q1 = std::min(15, static_cast<int>(src[i + j + 16] * id + 8.5f));
          dst[2 + j] = static_cast<uint8_t>(q0 | q1 << 4);
        }
      }
      return absl::OkStatus();
    case DType::kMXFP4:
      for (int64_t i = 0; i < n; i += 32, dst += 17) EncodeMxfp4Block(src + i, dst);
      return absl::OkStatus();
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: {
      auto encode = t == DType::kQ2_K   ? EncodeQ2_KBlock
                    : t == DType::kQ3_K ? EncodeQ3_KBlock
                    : t == DType::kQ4_K ? EncodeQ4_KBlock
                    : t == DType::kQ5_K ? EncodeQ5_KBlock
                                        : EncodeQ6_KBlock;
      const int bytes = GetDTypeInfo(t).block_bytes;
      for (int64_t i = 0; i < n; i += 256, dst += bytes) encode(src + i, dst);
      return absl::OkStatus();
    }
    default:
      break;
  }
  return absl::InvalidArgumentError(IsRuntimeLayout(t)
                                        ? "run-time layouts are made by RepackRows, not encoded"
                                        : "unknown dtype");
}

}  // namespace moe
