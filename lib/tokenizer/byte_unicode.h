// The GPT-2 byte <-> Unicode mapping used by byte-level BPE: every byte value is shown as one
// printable code point (printable Latin-1 bytes map to themselves, the rest to U+0100..), so
// vocabularies can store arbitrary bytes as text.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace moe {

// UTF-8 text of the code point that stands for each byte.
const std::array<std::string, 256>& ByteToUnicodeTable();

// The byte a code point stands for, or -1 when cp is not in the mapping.
int UnicodeToByte(char32_t cp);

}  // namespace moe
