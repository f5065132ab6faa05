// Encoders for the K-quant block formats (Q4_K, Q5_K, Q6_K). Straightforward min/max fits per
// sub-block: valid blocks that llama.cpp and libmoe dequantize to the same values, a little less
// accurate than llama.cpp's iterative search.
#pragma once

#include <cstdint>

namespace moe {

// Each encodes one 256-element super-block.
void EncodeQ4_KBlock(const float* x, uint8_t* block);
void EncodeQ5_KBlock(const float* x, uint8_t* block);
void EncodeQ6_KBlock(const float* x, uint8_t* block);

}  // namespace moe
