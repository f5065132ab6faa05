// Activations quantized once per token for integer dot products, as llama.cpp does: blocks of 32
// with a scale (d = max|x| / 127 over the values sharing it, rounded to half precision per block
// as ggml's q8_0 stores it; quants rounded to nearest) and the sums of each 16-element half
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

// Which blocks share a scale. Per block is llama.cpp's q8_0. Per super-block (256 values, as
// llama.cpp's q8_K for K-quant weights): every block of a super-block carries the same d, exact
// in float, so a K-quant kernel can multiply by it once per super-block instead of once per
// block (the blocks stay valid for every other kernel).
enum class ActivationScales { kPerBlock, kPerSuperBlock };
inline constexpr int64_t kSuperBlockValues = 256;

inline int64_t BlocksPerScale(ActivationScales s) {
  return s == ActivationScales::kPerSuperBlock ? kSuperBlockValues / 32 : 1;
}

// A super-block's 8 block sums (sum[0] + sum[1], at most 32 x 127 in magnitude) as 64 hi + lo
// in signed bytes, four to a word: hi of blocks 0-3, of blocks 4-7, lo of 0-3, of 4-7. The
// K-quant kernels multiply their 6-bit minimums with these by vpdpbusd (four instructions per
// token and super-block instead of eight float multiply-adds).
struct SplitSums {
  uint32_t words[4];
};

// out[s] for the super-blocks s < n_super of `blocks` (8 blocks each).
void SplitSuperBlockSums(const Q8Block* blocks, int64_t n_super, SplitSums* out);

// n must be a multiple of 32, and of 256 per super-block.
void QuantizeActivations(const float* x, int64_t n, Q8Block* out,
                         ActivationScales scales = ActivationScales::kPerBlock);

}  // namespace moe
