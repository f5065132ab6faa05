// Encoders of the non-linear 4-bit types (IQ4_NL: 32 values a block; IQ4_XS: 256 values with a
// 6-bit scale per 32). A direct fit, not llama-quantize's search over scales: the scale maps the
// value of largest magnitude onto the table's end, each value takes its nearest level, and the
// scale is then refit by least squares. Valid blocks that llama.cpp and libmoe decode alike;
// not the bytes llama-quantize writes.
#pragma once

#include <cstdint>

namespace moe {

void EncodeIq4NlBlock(const float* x, uint8_t* dst);  // 32 values, 18 bytes
void EncodeIq4XsBlock(const float* x, uint8_t* dst);  // 256 values, 136 bytes

}  // namespace moe
