// The row-group layouts of repack.h as byte permutations: GroupOffset says where byte j of a
// source block of row r goes within the group's block, so packing and unpacking are the same
// walk in two directions.
#include <cstring>
#include <vector>

#include "lib/backend/cpu/quant_rows.h"
#include "lib/backend/cpu/repack.h"

namespace moe {

DType GroupSourceType(DType group_type) {
  switch (group_type) {
    case DType::kQ8_0X16:
      return DType::kQ8_0;
    case DType::kQ4_0X16:
      return DType::kQ4_0;
    case DType::kQ6_KX16:
      return DType::kQ6_K;
    case DType::kQ5_KX16:
      return DType::kQ5_K;
    case DType::kMXFP4X16:
      return DType::kMXFP4;
    case DType::kQ2_KX16:
      return DType::kQ2_K;
    case DType::kQ3_KX16:
      return DType::kQ3_K;
    case DType::kQ4_KX16:
      return DType::kQ4_K;
    case DType::kQ5_0X16:
      return DType::kQ5_0;
    case DType::kIQ4_NLX16:
      return DType::kIQ4_NL;
    case DType::kIQ4_XSX16:
      return DType::kIQ4_XS;
    case DType::kQ4_1X16:
      return DType::kQ4_1;
    case DType::kQ5_1X16:
      return DType::kQ5_1;
    default:
      return group_type;
  }
}

namespace {

// Lane vector k, row r, byte i: the bytes of row r sit at 4r..4r+3 of each 64-byte vector.
inline int Lane(int k, int r, int i) { return 64 * k + 4 * r + i; }

// Offset within a group block (16 source blocks) of byte j of row r's source block.
int GroupOffset(DType source, int r, int j) {
  switch (source) {
    case DType::kQ8_0:  // [2 scale bytes][32 quants]
      return j < 2 ? 512 + 2 * r + j : Lane((j - 2) / 4, r, (j - 2) % 4);
    case DType::kQ4_0:  // [2 scale bytes][16 nibble bytes]
      return j < 2 ? 256 + 2 * r + j : Lane((j - 2) / 4, r, (j - 2) % 4);
    case DType::kIQ4_NL:  // [2 scale bytes][16 nibble bytes]: Q4_0's layout
      return j < 2 ? 256 + 2 * r + j : Lane((j - 2) / 4, r, (j - 2) % 4);
    case DType::kQ5_0:  // [2 scale bytes][4 fifth-bit bytes][16 nibble bytes]
      // Nibbles as Q4_0's, then one vector whose lane r is row r's 32 fifth bits, then scales.
      if (j < 2) return 320 + 2 * r + j;
      if (j < 6) return 256 + 4 * r + (j - 2);
      return Lane((j - 6) / 4, r, (j - 6) % 4);
    case DType::kQ4_1:  // [d][m][16 nibble bytes]: Q4_0X16's nibbles, the 16 d, the 16 m
      if (j < 2) return 256 + 2 * r + j;
      if (j < 4) return 288 + 2 * r + (j - 2);
      return Lane((j - 4) / 4, r, (j - 4) % 4);
    case DType::kQ5_1:  // [d][m][4 fifth-bit bytes][16 nibble bytes]: as Q5_0X16, then the m
      if (j < 2) return 320 + 2 * r + j;
      if (j < 4) return 352 + 2 * r + (j - 2);
      if (j < 8) return 256 + 4 * r + (j - 4);
      return Lane((j - 8) / 4, r, (j - 8) % 4);
    case DType::kIQ4_XS: {  // [d][scales_h][4 scales_l bytes][8 x 16 nibble bytes]
      // The 16 rows' d, scales_h and scales_l words (lane r: row r's), then per 32-value block
      // Q4_0X16's four nibble vectors.
      if (j < 2) return 2 * r + j;
      if (j < 4) return 32 + 2 * r + (j - 2);
      if (j < 8) return 64 + 4 * r + (j - 4);
      const int e = j - 8, m = e % 16;
      return 128 + 256 * (e / 16) + Lane(m / 4, r, m % 4);
    }
    case DType::kMXFP4:  // [E8M0 scale byte][16 nibble bytes]
      return j < 1 ? 256 + r : Lane((j - 1) / 4, r, (j - 1) % 4);
    case DType::kQ6_K: {  // [128 low-nibble bytes][64 high-bit bytes][16 int8 scales][d]
      // Per half, lane group k: [low bytes 4k.. | low bytes 32+4k.. | high bytes 4k..], 192 bytes.
      if (j < 128) {
        const int h = j / 64, m = j % 64;
        return 288 + 1536 * h + 192 * (m % 32 / 4) + Lane(m / 32, r, j % 4);
      }
      if (j < 192) {
        const int h = (j - 128) / 32, l = (j - 128) % 32;
        return 288 + 1536 * h + 192 * (l / 4) + Lane(2, r, j % 4);
      }
      if (j < 208) return 32 + Lane((j - 192) / 4, r, j % 4);
      return 2 * r + (j - 208);
    }
    case DType::kQ2_K: {  // [16 scale bytes][64 quant bytes][d][dmin]
      if (j < 16) return 64 + Lane(j / 4, r, j % 4);
      if (j < 80) {  // lane group k: [bytes 4k.. of the first half | of the second half]
        const int h = (j - 16) / 32, l = (j - 16) % 32;
        return 320 + 128 * (l / 4) + Lane(h, r, l % 4);
      }
      return j < 82 ? 2 * r + (j - 80) : 32 + 2 * r + (j - 82);
    }
    case DType::kQ3_K: {  // [32 high-bit bytes][64 low-bit bytes][12 scale bytes][d]
      // Lane group k: [high-bit bytes 4k.. | low-bit bytes 4k.. | low-bit bytes 32+4k..].
      if (j < 32) return 224 + 192 * (j / 4) + Lane(0, r, j % 4);
      if (j < 96) {
        const int h = (j - 32) / 32, l = (j - 32) % 32;
        return 224 + 192 * (l / 4) + Lane(1 + h, r, l % 4);
      }
      if (j < 108) return 32 + Lane((j - 96) / 4, r, j % 4);
      return 2 * r + (j - 108);
    }
    default: {  // Q4_K: [d][dmin][12 scale bytes][128 nibble bytes]; Q5_K: 32 fifth-bit bytes
                // before the nibbles, laid out as 8 lane vectors before the Q4_K part's
      const int fifth = source == DType::kQ5_K ? 32 : 0;
      if (j < 2) return 2 * r + j;
      if (j < 4) return 32 + 2 * r + (j - 2);
      if (j < 16) return 64 + Lane((j - 4) / 4, r, (j - 4) % 4);
      if (j < 16 + fifth) return 256 + Lane((j - 16) / 4, r, j % 4);
      const int e = j - 16 - fifth, chunk = e / 32, l = e % 32;
      return 256 + 16 * fifth + 512 * chunk + Lane(l / 4, r, l % 4);
    }
  }
}

// Q8_0 quants are stored unsigned (q + 128) for vpdpbusd; flipping the top bit does that.
inline uint8_t Flip(DType source, int j) { return source == DType::kQ8_0 && j >= 2 ? 0x80 : 0; }

}  // namespace

namespace internal {

void RepackGroups(DType t, uint8_t* data, int64_t rows, int64_t cols) {
  const DTypeInfo& info = GetDTypeInfo(t);
  const int64_t nb = cols / info.block_elems, bb = info.block_bytes;
  const size_t row_bytes = RowBytes(t, cols);
  // Where each byte of a block of each row goes: the same for every block.
  std::vector<int> offset(kGroupRows * bb);
  std::vector<uint8_t> flip(bb);
  for (int r = 0; r < kGroupRows; ++r) {
    for (int j = 0; j < bb; ++j) offset[r * bb + j] = GroupOffset(t, r, j);
  }
  for (int j = 0; j < bb; ++j) flip[j] = Flip(t, j);
  std::vector<uint8_t> src(kGroupRows * row_bytes);
  for (int64_t g = 0; g < rows / kGroupRows; ++g) {
    uint8_t* group = data + g * kGroupRows * row_bytes;
    std::memcpy(src.data(), group, src.size());
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = group + b * kGroupRows * bb;
      for (int r = 0; r < kGroupRows; ++r) {
        const uint8_t* block = src.data() + r * row_bytes + b * bb;
        const int* to = offset.data() + r * bb;
        for (int j = 0; j < bb; ++j) out[to[j]] = block[j] ^ flip[j];
      }
    }
  }
}

}  // namespace internal

void UngroupRow(DType t, const uint8_t* group, int row, uint8_t* out, int64_t cols) {
  const DType source = GroupSourceType(t);
  const DTypeInfo& info = GetDTypeInfo(source);
  const int64_t nb = cols / info.block_elems, bb = info.block_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* in = group + b * kGroupRows * bb;
    for (int j = 0; j < bb; ++j)
      out[b * bb + j] = in[GroupOffset(source, row, j)] ^ Flip(source, j);
  }
}

void DequantizeGroupRow(DType t, const uint8_t* group, int row, float* dst, int64_t cols) {
  const DType source = GroupSourceType(t);
  thread_local std::vector<uint8_t> src;
  src.resize(RowBytes(source, cols));
  UngroupRow(t, group, row, src.data(), cols);
  DequantizeRow(source, src.data(), dst, cols);
}

}  // namespace moe
