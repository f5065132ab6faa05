#include "lib/tokenizer/byte_unicode.h"

#include "lib/tokenizer/utf8.h"

namespace moe {
namespace {

// Bytes that are printable Latin-1 keep their own code point; the other 68 are numbered from
// U+0100 upwards in byte order (the assignment GPT-2's bytes_to_unicode defines).
bool KeepsOwnCodePoint(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> byte_to_text;
  std::array<int, 512> cp_to_byte;  // every mapped code point is below U+0200
};

const Tables& GetTables() {
  static const Tables* tables = [] {
    auto* t = new Tables();
    t->cp_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = KeepsOwnCodePoint(b) ? static_cast<char32_t>(b) : next++;
      AppendUtf8(cp, &t->byte_to_text[b]);
      t->cp_to_byte[cp] = b;
    }
    return t;
  }();
  return *tables;
}

}  // namespace

const std::array<std::string, 256>& ByteToUnicodeTable() { return GetTables().byte_to_text; }

int UnicodeToByte(char32_t cp) { return cp < 512 ? GetTables().cp_to_byte[cp] : -1; }

}  // namespace moe
