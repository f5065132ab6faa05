// Run-time layouts for the AVX-512 VNNI kernels, made at load. Same bytes as the source rows.
//
// Row layouts (one row at a time; used where a matrix's rows are not a multiple of 16). A Q8_0 or
// Q4_0 row stores each block's f16 scale next to its quants, which costs the kernels a gather per
// block; the R layouts keep the same bytes but put all quants first and all scales after them:
//   Q8_0R: [nb x 32 int8 quants][nb x f16 scales]
//   Q4_0R: [nb x 16 nibble bytes][nb x f16 scales], nibbles regrouped per 4 blocks (128
//          elements, 64 bytes): byte j holds element j in its low nibble and element j + 64 in
//          its high one, so one 64-byte load yields two runs of 64 consecutive elements.
//
// Row-group layouts (16 rows interleaved). In a "lane vector" of 64 bytes, bytes 4r..4r+3 belong
// to row r (r < 16): a vpdpbusd of it with four activation bytes broadcast to every lane adds
// four products to each of the 16 rows' sums, so 16 rows share every activation load and one
// float multiply-add per block finishes 16 rows. Per 32-element block b of the group:
//   Q8_0X16: 8 lane vectors (vector k: quants 4k..4k+3, stored as q + 128 so they are unsigned),
//            then the 16 rows' f16 scales                              (16 x 34 bytes)
//   Q4_0X16: 4 lane vectors (vector k: low nibbles = quants 4k..4k+3, high nibbles = quants
//            16+4k..16+4k+3), then the 16 f16 scales                   (16 x 18 bytes)
//   MXFP4X16: 4 lane vectors of E2M1 codes as Q4_0X16's nibbles, then the 16 rows' E8M0 scale
//            bytes                                                    (16 x 17 bytes)
// Per 256-element super-block:
//   Q4_KX16: 16 f16 d, 16 f16 dmin, 3 lane vectors of the rows' 12 packed scale bytes (vector w:
//            bytes 4w..4w+3), then per 64-element chunk c 8 lane vectors (vector k: low nibbles =
//            quants 4k..4k+3 of sub-block 2c, high nibbles = those of sub-block 2c+1, as Q4_K
//            pairs them)                                               (16 x 144 bytes)
//   Q5_KX16: as Q4_KX16 with, before the nibbles, 8 lane vectors of the rows' 32 fifth-bit
//            bytes (vector k: bytes 4k..4k+3; bit j of a byte belongs to sub-block j)
//                                                                      (16 x 176 bytes)
//   Q6_KX16: 16 f16 d, 4 lane vectors of the rows' 16 int8 scales, then per 128-quant half and
//            lane group k three lane vectors: low-nibble bytes 4k.., low-nibble bytes 32+4k..,
//            high-bit bytes 4k.. (Q6_K's own pairings)                (16 x 210 bytes)
//            The order is the decode kernel's reading order: an earlier layout that kept the
//            low and high bytes in separate runs decoded at half the speed, every super-block
//            starting with cache misses the hardware prefetcher did not cover.
//   Q2_KX16: 16 f16 d, 16 f16 dmin, 4 lane vectors of the rows' 16 (scale | min << 4) bytes,
//            then per lane group k two lane vectors: quant bytes 4k.. and 32+4k.. (each byte
//            holds four 2-bit fields, one per 32-quant block of its half)
//                                                                      (16 x 84 bytes)
//   Q3_KX16: 16 f16 d, 3 lane vectors of the rows' 12 packed scale bytes, then per lane group k
//            three lane vectors: high-bit bytes 4k.., low-bit bytes 4k.. and 32+4k..
//                                                                      (16 x 110 bytes)
// Each is a permutation of the source bytes (plus the +128 of Q8_0), so it holds exactly the
// source's values.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/base/dtype.h"

namespace moe {

// The run-time layout for a [rows x cols] matrix of type t whose products will run at `level`,
// or t itself when there is none. From AVX2 up the group layouts; the row layouts (Q8_0R,
// Q4_0R, for matrices whose rows do not come in sixteens) only with AVX-512 VNNI, the level
// their kernels are written for; below AVX2, none.
DType RepackedType(DType t, int64_t rows, int64_t cols, SimdLevel level = SimdLevel::kAvx512Vnni);

// Rewrites a [rows x cols] matrix in place from t to RepackedType(t, rows, cols, level).
void RepackRows(DType t, uint8_t* data, int64_t rows, int64_t cols,
                SimdLevel level = SimdLevel::kAvx512Vnni);

// Dequantizes one whole row of a row layout (Q8_0R, Q4_0R).
void DequantizeRepackedRow(DType t, const uint8_t* row, float* dst, int64_t cols);

// The file type a row-group layout was made from (Q8_0X16 -> Q8_0, ...); any other type itself.
DType GroupSourceType(DType group_type);

// Writes row `row` (< 16) of the row group that starts at `group` in its source type's layout.
void UngroupRow(DType t, const uint8_t* group, int row, uint8_t* out, int64_t cols);

// Dequantizes row `row` (< 16) of the row group that starts at `group` (any row-group type).
void DequantizeGroupRow(DType t, const uint8_t* group, int row, float* dst, int64_t cols);

namespace internal {
// The row-group half of RepackRows (repack_groups.cc): rows is a multiple of 16.
void RepackGroups(DType t, uint8_t* data, int64_t rows, int64_t cols);
}  // namespace internal

}  // namespace moe
