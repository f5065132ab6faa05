#include "lib/tokenizer/utf8.h"

namespace moe {

size_t DecodeUtf8(absl::string_view text, size_t pos, char32_t* cp) {
  const size_t n = text.size();
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  char32_t value;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (pos + len > n) return 0;
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if ((b & 0xC0) != 0x80) return 0;
    value = (value << 6) | (b & 0x3F);
  }
  if (value < min || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return len;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsIncompleteUtf8(absl::string_view text, size_t pos) {
  const size_t avail = text.size() - pos;
  if (avail == 0) return false;
  const auto b0 = static_cast<uint8_t>(text[pos]);
  // Lead bytes C0, C1 and F5..FF never start a well-formed sequence.
  const size_t len = (b0 >= 0xC2 && b0 <= 0xDF)   ? 2
                     : (b0 >= 0xE0 && b0 <= 0xEF) ? 3
                     : (b0 >= 0xF0 && b0 <= 0xF4) ? 4
                                                  : 0;
  if (len == 0 || avail >= len) return false;
  for (size_t i = 1; i < avail; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if ((b & 0xC0) != 0x80) return false;
    // The second byte also excludes overlong forms, surrogates and values above U+10FFFF.
    if (i == 1 && ((b0 == 0xE0 && b < 0xA0) || (b0 == 0xED && b > 0x9F) ||
                   (b0 == 0xF0 && b < 0x90) || (b0 == 0xF4 && b > 0x8F))) {
      return false;
    }
  }
  return true;
}

void Utf8ToUtf16WithOffsets(absl::string_view text, std::u16string* utf16,
                            std::vector<uint32_t>* offsets) {
  utf16->clear();
  offsets->clear();
  utf16->reserve(text.size());
  offsets->reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp;
    size_t len = DecodeUtf8(text, pos, &cp);
    if (len == 0) {
      cp = kReplacementChar;
      len = 1;
    }
    if (cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      utf16->push_back(static_cast<char16_t>(0xD800 + (v >> 10)));
      utf16->push_back(static_cast<char16_t>(0xDC00 + (v & 0x3FF)));
      offsets->push_back(static_cast<uint32_t>(pos));
      offsets->push_back(static_cast<uint32_t>(pos));
    } else {
      utf16->push_back(static_cast<char16_t>(cp));
      offsets->push_back(static_cast<uint32_t>(pos));
    }
    pos += len;
  }
  offsets->push_back(static_cast<uint32_t>(text.size()));
}

}  // namespace moe
