// Portable kernels: the reference semantics of every SIMD path.
#include <cstring>

#include "lib/backend/block_dot.h"
#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"
#include "lib/base/half.h"

namespace moe::kernels {
namespace {

// The run-time layouts (repack.h): quants first, f16 scales after them.
float DotQ8_0R(const uint8_t* w, const Q8Block* x, int64_t n) {
  const int64_t nb = n / 32;
  const int8_t* q = reinterpret_cast<const int8_t*>(w);
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (int i = 0; i < 32; ++i) acc += q[32 * b + i] * x[b].q[i];
    s += LoadHalf(w + 32 * nb + 2 * b) * x[b].d * acc;
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
      s += LoadHalf(w + 16 * nb + 2 * (4 * g + k)) * a.d * (acc[k] - 8 * (a.sum[0] + a.sum[1]));
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
  for (int64_t i = 0; i < n; ++i) s += LoadHalf(w + 2 * i) * x[i];
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
      return DotQ8_0Row;
    case DType::kQ4_0:
      return DotQ4_0Row;
    case DType::kQ2_K:
      return DotQ2_KRow;
    case DType::kQ3_K:
      return DotQ3_KRow;
    case DType::kQ4_K:
      return DotQ4_KRow;
    case DType::kQ5_K:
      return DotQ5_KRow;
    case DType::kQ6_K:
      return DotQ6_KRow;
    case DType::kMXFP4:
      return DotMXFP4Row;
    case DType::kQ4_1:
      return DotQ4_1Row;
    case DType::kQ5_0:
      return DotQ5_0Row;
    case DType::kQ5_1:
      return DotQ5_1Row;
    case DType::kIQ4_NL:
      return DotIQ4_NLRow;
    case DType::kIQ4_XS:
      return DotIQ4_XSRow;
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
