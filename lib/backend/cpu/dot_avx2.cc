// AVX2 + FMA + F16C kernels (this file is compiled with those extensions enabled; it is only
// called when the CPU has them).
#include <immintrin.h>

#include <cstring>

#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/iq4nl.h"
#include "lib/backend/cpu/kquant_scales.h"
#include "lib/backend/cpu/mxfp4.h"

namespace moe::kernels {
namespace avx2 {

// u8 x s8 through maddubs (int16 pairs, then madd to int32): every caller keeps the pair sums
// inside int16 (u <= 63, or |a| <= 128 x |b| <= 127 for the signed trick).
inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

#include "lib/backend/cpu/dot_x86.inc"

}  // namespace avx2

QuantDotFn Avx2QuantDot(DType t) { return avx2::QuantDotTable(t); }
FloatDotFn Avx2FloatDot(DType t) { return avx2::FloatDotTable(t); }

}  // namespace moe::kernels
