// Encoders of the 32-value block types Q4_0, Q4_1, Q5_0 and Q5_1 with ggml's reference rules,
// which llama-quantize applies when no importance matrix is given: so a file written by
// moe-quantize holds the bytes llama-quantize would write for these types.
#pragma once

#include <cstdint>

namespace moe {

// Each encodes 32 values of x into one block at dst (18, 20, 22 and 24 bytes).
void EncodeQ4_0Block(const float* x, uint8_t* dst);
void EncodeQ4_1Block(const float* x, uint8_t* dst);
void EncodeQ5_0Block(const float* x, uint8_t* dst);
void EncodeQ5_1Block(const float* x, uint8_t* dst);

}  // namespace moe
