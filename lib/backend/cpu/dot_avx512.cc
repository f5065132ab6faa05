// AVX-512 VNNI kernels on 256-bit vectors (AVX512VL): vpdpbusd does the u8 x s8 products and
// their int32 sums in one instruction, without maddubs' int16 saturation.
#include <immintrin.h>

#include <cstring>

#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/kquant_scales.h"

namespace moe::kernels {
namespace avx512vnni {

inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

#include "lib/backend/cpu/dot_x86.inc"

}  // namespace avx512vnni

QuantDotFn Avx512VnniQuantDot(DType t) { return avx512vnni::QuantDotTable(t); }

}  // namespace moe::kernels
