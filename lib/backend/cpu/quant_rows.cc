#include "lib/backend/cpu/quant_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/backend/block_decode.h"
#include "lib/backend/block_encode.h"
#include "lib/backend/cpu/block32_encode.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/dequant_kernels.h"
#include "lib/backend/cpu/iq4_encode.h"
#include "lib/backend/cpu/kquant_encode.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/backend/cpu/repack.h"
#include "lib/backend/cpu/target_clones.h"
#include "lib/base/half.h"

namespace moe {
namespace {

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

// Compiled for several ISAs; the loader picks the best the CPU has at run time.
MOE_TARGET_CLONES("avx512f", "avx2", "default")
float DotF32(const float* a, const float* b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

using EncodeBlockFn = void (*)(const float* x, uint8_t* block);

// The encoder of one block of a quantized file type; null for any other type.
EncodeBlockFn BlockEncoder(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return EncodeQ8_0Block;
    case DType::kQ4_0:
      return EncodeQ4_0Block;
    case DType::kQ4_1:
      return EncodeQ4_1Block;
    case DType::kQ5_0:
      return EncodeQ5_0Block;
    case DType::kQ5_1:
      return EncodeQ5_1Block;
    case DType::kMXFP4:
      return EncodeMxfp4Block;
    case DType::kIQ4_NL:
      return EncodeIq4NlBlock;
    case DType::kIQ4_XS:
      return EncodeIq4XsBlock;
    case DType::kQ2_K:
      return EncodeQ2_KBlock;
    case DType::kQ3_K:
      return EncodeQ3_KBlock;
    case DType::kQ4_K:
      return EncodeQ4_KBlock;
    case DType::kQ5_K:
      return EncodeQ5_KBlock;
    case DType::kQ6_K:
      return EncodeQ6_KBlock;
    default:
      return nullptr;
  }
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
      const BlockShape block = QuantBlockShape(t);
      for (int64_t i = 0; i < n; i += block.elems, row += block.bytes) {
        DecodeQuantBlock(t, row, dst + i);
      }
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
      for (int64_t i = 0; i < n; ++i) StoreHalf(src[i], dst + 2 * i);
      return absl::OkStatus();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = FloatToBf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return absl::OkStatus();
    default:
      if (const EncodeBlockFn encode = BlockEncoder(t)) {
        const DTypeInfo& info = GetDTypeInfo(t);
        for (int64_t i = 0; i < n; i += info.block_elems, dst += info.block_bytes) {
          encode(src + i, dst);
        }
        return absl::OkStatus();
      }
      break;
  }
  return absl::InvalidArgumentError(IsRuntimeLayout(t)
                                        ? "run-time layouts are made by RepackRows, not encoded"
                                        : "unknown dtype");
}

}  // namespace moe
