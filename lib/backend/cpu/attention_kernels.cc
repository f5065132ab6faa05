#include "lib/backend/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "lib/backend/cpu/quant_rows.h"

namespace moe {
namespace kernels {

void SoftmaxRows(float* scores, int64_t rows, int64_t len) {
  for (int64_t g = 0; g < rows; ++g) {
    float* s = scores + g * len;
    const float max_s = *std::max_element(s, s + len);
    float sum = 0;
    for (int64_t p = 0; p < len; ++p) sum += s[p] = std::exp(s[p] - max_s);
    const float inv = 1.0f / sum;
    for (int64_t p = 0; p < len; ++p) s[p] *= inv;
  }
}

namespace {

void AttendOneToken(const AttentionHeads& a) {
  const int64_t hd = a.head_dim;
  const int64_t first = a.FirstSeen(a.len);
  const int64_t len = a.len - first;
  thread_local std::vector<float> scores, k, v;
  if (scores.capacity() < 4096) scores.reserve(4096);  // grows only with long contexts
  scores.resize(a.group * len);
  k.resize(hd);
  v.resize(hd);
  for (int64_t p = first; p < a.len; ++p) {
    DequantizeRow(a.dtype, a.k + a.KvRowOffset(p), k.data(), hd);
    for (int64_t g = 0; g < a.group; ++g) {
      float s = 0;
      for (int64_t i = 0; i < hd; ++i) s += a.q[g * hd + i] * k[i];
      scores[g * len + p - first] = s * a.scale;
    }
  }
  if (a.sinks == nullptr) {
    SoftmaxRows(scores.data(), a.group, len);
  } else {
    // The sink joins the normalisation (and the maximum) but carries no value.
    for (int64_t g = 0; g < a.group; ++g) {
      float* s = scores.data() + g * len;
      const float max_s = std::max(*std::max_element(s, s + len), a.sinks[g]);
      float sum = std::exp(a.sinks[g] - max_s);
      for (int64_t p = 0; p < len; ++p) sum += s[p] = std::exp(s[p] - max_s);
      const float inv = 1.0f / sum;
      for (int64_t p = 0; p < len; ++p) s[p] *= inv;
    }
  }
  std::fill(a.out, a.out + a.group * hd, 0.0f);
  for (int64_t p = first; p < a.len; ++p) {
    DequantizeRow(a.dtype, a.v + a.KvRowOffset(p), v.data(), hd);
    for (int64_t g = 0; g < a.group; ++g) {
      const float w = scores[g * len + p - first];
      float* o = a.out + g * hd;
      for (int64_t i = 0; i < hd; ++i) o[i] += w * v[i];
    }
  }
}

}  // namespace

void AttendPortable(const AttentionHeads& a) {
  for (int64_t i = 0; i < a.tokens; ++i) {
    AttentionHeads one = a;
    one.q = a.q + i * a.q_stride;
    one.out = a.out + i * a.q_stride;
    one.len = a.len + i;
    one.tokens = 1;
    AttendOneToken(one);
  }
}

}  // namespace kernels

AttendFn GetAttend(SimdLevel level, DType kv_type, int64_t head_dim) {
  if (kv_type != DType::kF32 && kv_type != DType::kF16 && kv_type != DType::kQ8_0) {
    return kernels::AttendPortable;
  }
  // Q8_0 rows come in blocks of 32 values: the vector kernels load whole halves or quarters.
  if (kv_type == DType::kQ8_0 && head_dim % 32 != 0) return kernels::AttendPortable;
  if (level >= SimdLevel::kAvx512) {
    if (AttendFn f = kernels::Avx512Attend(kv_type, head_dim)) return f;
  }
  if (level >= SimdLevel::kAvx2 && head_dim % 8 == 0 && head_dim > 0) return kernels::AttendAvx2;
  return kernels::AttendPortable;
}

}  // namespace moe
