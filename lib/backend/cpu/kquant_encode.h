// Encoders for the K-quant block formats. Q4_K, Q5_K, Q6_K: straightforward min/max fits per
// sub-block, a little less accurate than llama.cpp's iterative search. Q2_K and Q3_K, where a
// min/max fit wastes most of four or eight levels on outliers: each 16-value group's scale (and
// offset) refined by alternating least squares from several starting ranges. All write valid
// blocks that llama.cpp and libmoe dequantize to the same values.
#pragma once

#include <cstdint>

namespace moe {

// Each encodes one 256-element super-block.
void EncodeQ2_KBlock(const float* x, uint8_t* block);
void EncodeQ3_KBlock(const float* x, uint8_t* block);
void EncodeQ4_KBlock(const float* x, uint8_t* block);
void EncodeQ5_KBlock(const float* x, uint8_t* block);
void EncodeQ6_KBlock(const float* x, uint8_t* block);

}  // namespace moe
