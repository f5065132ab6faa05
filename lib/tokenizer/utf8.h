// UTF-8 helpers shared by the tokenizers. Invalid input is never rejected: every function
// treats a byte that does not start a well-formed sequence as a one-byte unit of its own, so
// arbitrary bytes can still be tokenized (byte fallback) and round-trip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace moe {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length of the well-formed UTF-8 sequence starting at text[pos], or 0 when the bytes there
// are not one (overlong forms, surrogates, > U+10FFFF and truncated sequences are invalid).
// On success *cp receives the code point.
size_t DecodeUtf8(absl::string_view text, size_t pos, char32_t* cp);

// Appends the UTF-8 encoding of cp (which must be a valid scalar value).
void AppendUtf8(char32_t cp, std::string* out);

// True when text[pos..] is a proper prefix of some well-formed sequence (more bytes could
// complete it); used by streaming decoders to hold bytes back.
bool IsIncompleteUtf8(absl::string_view text, size_t pos);

// UTF-16 copy of text for ICU, with each invalid byte replaced by U+FFFD. offsets has one entry
// per UTF-16 unit plus one: the byte offset in text where that unit's code point starts (the
// last entry is text.size()), so match positions map back to exact byte ranges.
void Utf8ToUtf16WithOffsets(absl::string_view text, std::u16string* utf16,
                            std::vector<uint32_t>* offsets);

}  // namespace moe
