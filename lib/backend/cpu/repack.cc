#include "lib/backend/cpu/repack.h"

#include <cstring>
#include <vector>

#include "lib/base/half.h"

namespace moe {

DType RepackedType(DType t, int64_t rows, int64_t cols, SimdLevel level) {
  if (level < SimdLevel::kAvx2) return t;
  const bool vnni = level >= SimdLevel::kAvx512Vnni;
  if (rows % kGroupRows == 0) {
    if (t == DType::kQ8_0 && cols % 32 == 0) return DType::kQ8_0X16;
    if (t == DType::kQ4_0 && cols % 32 == 0) return DType::kQ4_0X16;
    if (t == DType::kMXFP4 && cols % 32 == 0) return DType::kMXFP4X16;
    if (t == DType::kQ4_K && cols % 256 == 0) return DType::kQ4_KX16;
    if (t == DType::kQ5_K && cols % 256 == 0) return DType::kQ5_KX16;
    if (t == DType::kQ6_K && cols % 256 == 0) return DType::kQ6_KX16;
    if (t == DType::kQ2_K && cols % 256 == 0) return DType::kQ2_KX16;
    if (t == DType::kQ3_K && cols % 256 == 0) return DType::kQ3_KX16;
    // Group kernels for these only with AVX-512 VNNI; below it their row kernels are faster
    // than a group taken apart row by row.
    if (vnni && t == DType::kQ5_0 && cols % 32 == 0) return DType::kQ5_0X16;
    if (vnni && t == DType::kIQ4_NL && cols % 32 == 0) return DType::kIQ4_NLX16;
    if (vnni && t == DType::kIQ4_XS && cols % 256 == 0) return DType::kIQ4_XSX16;
    if (vnni && t == DType::kQ4_1 && cols % 32 == 0) return DType::kQ4_1X16;
    if (vnni && t == DType::kQ5_1 && cols % 32 == 0) return DType::kQ5_1X16;
  }
  if (!vnni) return t;  // the row layouts have kernels only for AVX-512 VNNI
  if (t == DType::kQ8_0 && cols % 32 == 0) return DType::kQ8_0R;
  if (t == DType::kQ4_0 && cols % 128 == 0) return DType::kQ4_0R;
  return t;
}

void RepackRows(DType t, uint8_t* data, int64_t rows, int64_t cols, SimdLevel level) {
  const DType r = RepackedType(t, rows, cols, level);
  if (r == t) return;
  if (RowGroup(r) > 1) return internal::RepackGroups(t, data, rows, cols);
  const int64_t nb = cols / 32;
  const size_t row_bytes = RowBytes(t, cols);
  std::vector<uint8_t> tmp(row_bytes);
  for (int64_t i = 0; i < rows; ++i) {
    uint8_t* row = data + i * row_bytes;
    if (t == DType::kQ8_0) {
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(tmp.data() + 32 * b, row + 34 * b + 2, 32);
        std::memcpy(tmp.data() + 32 * nb + 2 * b, row + 34 * b, 2);
      }
    } else {  // Q4_0: element e of block b is nibble (e < 16 ? low : high) of byte e % 16
      uint8_t* nib = tmp.data();
      std::memset(nib, 0, 16 * nb);
      for (int64_t g = 0; g < nb / 4; ++g) {
        for (int e = 0; e < 128; ++e) {
          const int64_t b = 4 * g + e / 32, k = e % 32;
          const uint8_t byte = row[18 * b + 2 + k % 16];
          const uint8_t q = k < 16 ? byte & 0x0f : byte >> 4;
          nib[64 * g + e % 64] |= e < 64 ? q : q << 4;
        }
      }
      for (int64_t b = 0; b < nb; ++b) std::memcpy(tmp.data() + 16 * nb + 2 * b, row + 18 * b, 2);
    }
    std::memcpy(row, tmp.data(), row_bytes);
  }
}

void DequantizeRepackedRow(DType t, const uint8_t* row, float* dst, int64_t cols) {
  const int64_t nb = cols / 32;
  const int64_t quant_bytes = t == DType::kQ8_0R ? 32 : 16;
  float d[4];
  auto load_scales = [&](int64_t b, int count) {
    for (int k = 0; k < count; ++k) {
      uint16_t h;
      std::memcpy(&h, row + quant_bytes * nb + 2 * (b + k), 2);
      d[k] = HalfToFloat(h);
    }
  };
  if (t == DType::kQ8_0R) {
    const int8_t* q = reinterpret_cast<const int8_t*>(row);
    for (int64_t b = 0; b < nb; ++b) {
      load_scales(b, 1);
      for (int k = 0; k < 32; ++k) dst[32 * b + k] = d[0] * q[32 * b + k];
    }
    return;
  }
  for (int64_t g = 0; g < nb / 4; ++g) {  // Q4_0R: 4 blocks per 64 bytes
    load_scales(4 * g, 4);
    const uint8_t* bytes = row + 64 * g;
    float* out = dst + 128 * g;
    for (int j = 0; j < 64; ++j) {
      out[j] = d[j / 32] * static_cast<float>((bytes[j] & 0x0f) - 8);
      out[j + 64] = d[2 + j / 32] * static_cast<float>((bytes[j] >> 4) - 8);
    }
  }
}

}  // namespace moe
