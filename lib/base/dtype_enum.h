// The element types of weight tensors, alone: what the CUDA kernels need of dtype.h (which also
// brings Abseil) to know a block's type. The numbering is part of the .moe format: append only.
#pragma once

#include <cstdint>

namespace moe {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,
  kQ4_0 = 4,
  kQ4_K = 5,
  kQ5_K = 6,
  kQ6_K = 7,
  // Run-time layouts: rows re-laid at load for the AVX-512 kernels (quants contiguous, the f16
  // scales after them). Same bytes per row as their source types; never stored in files.
  kQ8_0R = 8,
  kQ4_0R = 9,
  // Row-group layouts (all from here on): 16 rows interleaved so that one 512-bit register holds
  // four consecutive quants of each of the 16 rows and one integer instruction makes 16 rows'
  // partial sums (repack.h). The same bytes as 16 rows of the source type; row r is not contiguous.
  kQ8_0X16 = 10,
  kQ4_0X16 = 11,
  kQ4_KX16 = 12,
  kQ6_KX16 = 13,
  kQ5_KX16 = 14,
  // A file type again: OCP microscaling FP4 (GGUF type 39), one E8M0 scale byte then 16 bytes
  // of 4-bit E2M1 codes per 32 values (gpt-oss's expert weights).
  kMXFP4 = 15,
  // A row-group layout again (repack.h): 16 MXFP4 rows interleaved.
  kMXFP4X16 = 16,
  // File types again, the 2- and 3-bit K-quants (GGUF types 10 and 11), 256 values a super-block:
  // Q2_K: 16 bytes of 4-bit (scale, min) pairs, 64 bytes of 2-bit quants, f16 d and dmin;
  // Q3_K: 32 bytes of high bits, 64 bytes of 2-bit low quants, 12 bytes of 6-bit scales, f16 d.
  kQ2_K = 17,
  kQ3_K = 18,
  // Row-group layouts again (repack.h): 16 Q2_K or Q3_K rows interleaved.
  kQ2_KX16 = 19,
  kQ3_KX16 = 20,
  // File types again, the other 32-value blocks llama.cpp writes (its quantizer falls back to
  // them for rows that are not whole 256-value super-blocks: Q4_K -> Q5_0, Q5_K -> Q5_1, IQ4_XS
  // -> IQ4_NL) and the 4.25-bit non-linear super-block type:
  // Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = d q + m.
  // Q5_0: f16 d, 4 bytes of fifth bits, 16 bytes of nibbles; x = d (q - 16).
  // Q5_1: f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of nibbles; x = d q + m.
  // IQ4_NL: f16 d, 16 bytes of 4-bit indices into a 16-value table; x = d table[q].
  // IQ4_XS: 256 values: f16 d, 6-bit scales of the eight 32-value blocks (u16 high bits, 4
  // bytes of low nibbles), 128 bytes of IQ4_NL indices; x = d (scale - 32) table[q].
  kQ4_1 = 21,
  kQ5_0 = 22,
  kQ5_1 = 23,
  kIQ4_NL = 24,
  kIQ4_XS = 25,
  // Row-group layouts again (repack.h): 16 Q5_0 or IQ4_NL rows interleaved.
  kQ5_0X16 = 26,
  kIQ4_NLX16 = 27,
  // And 16 IQ4_XS rows (256-value super-blocks) interleaved.
  kIQ4_XSX16 = 28,
  // And 16 Q4_1 or Q5_1 rows interleaved.
  kQ4_1X16 = 29,
  kQ5_1X16 = 30,
};
inline constexpr int kNumDTypes = 31;

}  // namespace moe
