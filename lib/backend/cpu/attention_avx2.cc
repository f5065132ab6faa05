// AVX2 attention, the same plan as attention_avx512.cc in 8 lanes: scores 8 cached positions at
// a time (K rows widened once per block for every query row of the tile, each row's 8 partial
// sums reduced together), a vector-exp softmax, and output sums a few rows and chunks at a time
// so they fit the 16 vector registers. Every score and output is summed in the same order
// whatever the tile holds.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lib/backend/cpu/attention_kernels.h"
#include "lib/backend/cpu/exp_avx2.h"

namespace moe::kernels {
namespace {

// Values 8c .. 8c+7 of a cached row of type T as floats. Q8_0: block c / 4 (a half-precision
// scale, then 32 signed bytes), each value its byte times the scale, as DequantizeRow computes it.
// The type is a template argument, as in the AVX-512 kernel: no test of it for each 8 values.
template <DType T>
inline __m256 LoadRow8(const uint8_t* row, int64_t c) {
  if constexpr (T == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row) + c));
  } else if constexpr (T == DType::kQ8_0) {
    const uint8_t* block = row + (c / 4) * 34;
    uint16_t d;
    std::memcpy(&d, block, 2);
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + (c % 4) * 8));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(_cvtsh_ss(d)));
  } else {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + 8 * c);
  }
}

// Lane i of the result = the sum of the 8 lanes of v[i].
inline __m256 SumEach8(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

inline __m256 TailMask(int64_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(left, 8))), lane));
}

// With an extra logit `sink` that joins the normalisation (-inf: none).
void SoftmaxRow(float* s, int64_t len, float sink) {
  float max_s = sink;
  for (int64_t p = 0; p < len; ++p) max_s = std::max(max_s, s[p]);
  const __m256 m = _mm256_set1_ps(max_s);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t p = 0; p < len; p += 8) {
    const __m256i k = _mm256_castps_si256(TailMask(len - p));
    const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(k),
                                   ExpAvx2(_mm256_sub_ps(_mm256_maskload_ps(s + p, k), m)));
    _mm256_maskstore_ps(s + p, k, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vsum);
  float sum = 0;
  for (float v : lanes) sum += v;
  sum += std::exp(sink - max_s);  // no sink: exp(-inf) adds an exact zero
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (int64_t p = 0; p < len; p += 8) {
    const __m256i k = _mm256_castps_si256(TailMask(len - p));
    _mm256_maskstore_ps(s + p, k, _mm256_mul_ps(_mm256_maskload_ps(s + p, k), inv));
  }
}

// Output sums of query rows [r0, r0 + NR) for chunks c0 and c0 + 1 (nc of them) over positions
// [first, len); NR a template argument so that the sums stay in registers.
template <DType T, int NR>
void OutputChunks(const AttentionHeads& a, const KvRowPrefetch& prefetch, const float* scores,
                  int64_t ld, int64_t begin, int64_t r0, int64_t c0, int64_t nc, int64_t first,
                  int64_t len, float* const* out) {
  __m256 acc[NR][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
  ForEachKvRow(a, a.v, first, len, [&](int64_t p, const uint8_t* v_row) {
    // The rows ahead are asked for on the first pass over the chunks.
    const uint8_t* row = c0 == 0 ? prefetch.VRow(p, v_row, len) : v_row;
    const __m256 v0 = LoadRow8<T>(row, c0);
    const __m256 v1 = nc > 1 ? LoadRow8<T>(row, c0 + 1) : _mm256_setzero_ps();
    for (int g = 0; g < NR; ++g) {
      const __m256 w = _mm256_broadcast_ss(&scores[(r0 + g) * ld + (p - begin)]);
      acc[g][0] = _mm256_fmadd_ps(w, v0, acc[g][0]);
      acc[g][1] = _mm256_fmadd_ps(w, v1, acc[g][1]);
    }
  });
  for (int g = 0; g < NR; ++g) {
    _mm256_storeu_ps(out[g] + 8 * c0, acc[g][0]);
    if (nc > 1) _mm256_storeu_ps(out[g] + 8 * c0 + 8, acc[g][1]);
  }
}

template <DType T>
void Attend(const AttentionHeads& a) {
  const int64_t chunks = a.head_dim / 8, hd = a.head_dim;
  const QueryRows<8> qr(a);
  const int64_t rows = qr.rows, span = qr.span, seen_from = qr.seen_from, begin = qr.begin,
                ld = qr.ld;
  thread_local std::vector<float> scores, kbuf;
  if (scores.capacity() < 16384) scores.reserve(16384);  // grows only with long contexts
  scores.resize(rows * ld);
  kbuf.resize(8 * hd);
  const KvRowPrefetch prefetch(a, seen_from, span);
  for (int64_t p0 = begin; p0 < span; p0 += 8) {
    for (int64_t i = 0; i < 8; ++i) {
      // Only positions some row sees have a row: a paged table ends at the span, and a sliding
      // window's blocks before the first row's window may be given back (PagedKvCache).
      const bool seen = p0 + i >= seen_from && p0 + i < span;
      const uint8_t* row = seen ? prefetch.KRow(p0 + i) : nullptr;
      for (int64_t c = 0; c < chunks; ++c) {
        _mm256_storeu_ps(kbuf.data() + i * hd + 8 * c,
                         seen ? LoadRow8<T>(row, c) : _mm256_setzero_ps());
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* q = a.q + qr.Offset(r);
      __m256 part[8];
      for (int i = 0; i < 8; ++i) {
        const float* k = kbuf.data() + i * hd;
        part[i] = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k));
        for (int64_t c = 1; c < chunks; ++c)
          part[i] =
              _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), _mm256_loadu_ps(k + 8 * c), part[i]);
      }
      _mm256_storeu_ps(scores.data() + r * ld + (p0 - begin),
                       _mm256_mul_ps(SumEach8(part), _mm256_set1_ps(a.scale)));
    }
  }
  qr.SoftmaxEach(scores.data(), SoftmaxRow);
  // Output sums: 4 rows x 2 chunks in registers at a time, over the positions any of them sees.
  qr.ForEachFour([&](auto nr, int64_t r0, int64_t first, int64_t len, float* const* out) {
    for (int64_t c0 = 0; c0 < chunks; c0 += 2) {
      const int64_t nc = std::min<int64_t>(2, chunks - c0);
      OutputChunks<T, decltype(nr)::value>(a, prefetch, scores.data(), ld, begin, r0, c0, nc, first,
                                           len, out);
    }
  });
}

}  // namespace

void AttendAvx2(const AttentionHeads& a) {
  switch (a.dtype) {
    case DType::kF32:
      return Attend<DType::kF32>(a);
    case DType::kQ8_0:
      return Attend<DType::kQ8_0>(a);
    default:  // F16: GetAttend sends no other type here
      return Attend<DType::kF16>(a);
  }
}

}  // namespace moe::kernels
