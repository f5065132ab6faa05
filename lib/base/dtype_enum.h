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
};
inline constexpr int kNumDTypes = 21;

}  // namespace moe
