// Activations quantized once per token for integer dot products, as llama.cpp does: blocks of 32
// with one scale (d = max|x| / 127, rounded to half precision as ggml stores it; quants rounded to
// nearest) and the sums of each 16-element half
// (the K-quant kernels subtract offsets with them).
#pragma once

#include <cstdint>

namespace moe {

struct Q8Block {
  float d;
  // d * (sum[0] + sum[1]) as a float: what the K-quant group kernels subtract their minimums
  // with, read as a broadcast memory operand (made in their inner loop it was +7 % of the time).
  float dsum;
  int16_t sum[2];  // sums of q[0..16) and q[16..32)
  int8_t q[32];
};
static_assert(sizeof(Q8Block) == 44);

// n must be a multiple of 32.
void QuantizeActivations(const float* x, int64_t n, Q8Block* out);

}  // namespace moe
