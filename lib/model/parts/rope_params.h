// A model's rotary encoding as the backend applies it.
#pragma once

#include <array>
#include <cstdint>

#include "lib/backend/backend.h"
#include "lib/model/model.h"

namespace moe {

// The model's RoPE over rope_dim dimensions of each head from `offset`, with its YaRN scaling,
// cos/sin magnitude (rope_attn_factor, times YaRN's 1 + 0.1 ln(factor) as llama.cpp applies) and
// frequency factors (rope_freqs) when the file has them.
RopeParams RopeFor(const Model& model, int64_t offset = 0);

// Interleaved multimodal RoPE (llama.cpp's IMROPE) for a text token, whose temporal, height and
// width positions are its position and whose extra position is 0: whether rotary pair i turns
// (false: it keeps angle 0). `sections` as HParams::rope_sections, not all 0.
bool MultimodalPairTurnsForText(const std::array<int64_t, 4>& sections, int64_t i);

}  // namespace moe
