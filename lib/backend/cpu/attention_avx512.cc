// AVX-512 attention: a cached row is head_dim / 16 vectors (F16 rows widened on load), used by
// every query head of the group; the group's output sums stay in vectors until the end.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lib/backend/cpu/attention_kernels.h"

namespace moe::kernels {
namespace {

constexpr int kMaxChunks = 16;  // head_dim <= 256

inline __m512 LoadRow(const uint8_t* row, int c, bool f16) {
  return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + c))
             : _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * c);
}

// C: head_dim / 16, fixed for the common head sizes so the vectors stay in registers; 0 = read
// at run time.
template <int C>
void Attend(const AttentionHeads& a) {
  const int chunks = C > 0 ? C : static_cast<int>(a.head_dim / 16);
  const bool f16 = a.dtype == DType::kF16;
  const int64_t hd = a.head_dim;
  thread_local std::vector<float> scores;
  if (scores.capacity() < 4096) scores.reserve(4096);  // grows only with long contexts
  scores.resize(a.group * a.len);
  for (int64_t p = 0; p < a.len; ++p) {
    __m512 k[kMaxChunks];
    const uint8_t* row = a.k + p * a.row_bytes;
    for (int c = 0; c < chunks; ++c) k[c] = LoadRow(row, c, f16);
    for (int64_t g = 0; g < a.group; ++g) {
      const float* q = a.q + g * hd;
      __m512 s = _mm512_mul_ps(_mm512_loadu_ps(q), k[0]);
      for (int c = 1; c < chunks; ++c) s = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), k[c], s);
      scores[g * a.len + p] = _mm512_reduce_add_ps(s) * a.scale;
    }
  }
  SoftmaxRows(scores.data(), a.group, a.len);
  // Output sums: up to 4 heads at a time in registers.
  for (int64_t g0 = 0; g0 < a.group; g0 += 4) {
    const int64_t ng = std::min<int64_t>(4, a.group - g0);
    __m512 acc[4][kMaxChunks];
    for (int64_t g = 0; g < ng; ++g)
      for (int c = 0; c < chunks; ++c) acc[g][c] = _mm512_setzero_ps();
    for (int64_t p = 0; p < a.len; ++p) {
      __m512 v[kMaxChunks];
      const uint8_t* row = a.v + p * a.row_bytes;
      for (int c = 0; c < chunks; ++c) v[c] = LoadRow(row, c, f16);
      for (int64_t g = 0; g < ng; ++g) {
        const __m512 w = _mm512_set1_ps(scores[(g0 + g) * a.len + p]);
        for (int c = 0; c < chunks; ++c) acc[g][c] = _mm512_fmadd_ps(w, v[c], acc[g][c]);
      }
    }
    for (int64_t g = 0; g < ng; ++g)
      for (int c = 0; c < chunks; ++c) _mm512_storeu_ps(a.out + (g0 + g) * hd + 16 * c, acc[g][c]);
  }
}

}  // namespace

AttendFn Avx512Attend(int64_t head_dim) {
  if (head_dim % 16 != 0 || head_dim / 16 > kMaxChunks || head_dim == 0) return nullptr;
  switch (head_dim) {
    case 64:
      return Attend<4>;
    case 128:
      return Attend<8>;
    default:
      return Attend<0>;
  }
}

}  // namespace moe::kernels
