// Texts for comparing tokenizers against a reference: multilingual prose, code, whitespace
// runs, emoji, special-token markup, and random Unicode strings from a fixed seed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lib/tokenizer/utf8.h"

namespace moe::testing {

inline std::vector<std::string> FixedCorpus() {
  return {
      "Hello world",
      " Hello world",
      "Hello World!  How are   you?\n\nI'm fine, thanks. You'll see; we'd've DONE IT'S.",
      "The quick brown fox jumps over the lazy dog 1234567890 times: 3.14159, -42, 1e-9.",
      "Größere Straßen führen über Brücken; Ünïcödé ñandú çà et là.",
      "Съешь же ещё этих мягких французских булок, да выпей чаю.",
      "Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο.",
      "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧！",
      "日本語のテキスト：ひらがな、カタカナ、漢字を混ぜて書きます。",
      "한국어 문장도 토큰화해 봅시다. 안녕하세요!",
      "العربية: مرحبا بالعالم، كيف حالك؟",
      "हिन्दी में यह एक वाक्य है। ภาษาไทยก็มีเหมือนกัน",
      "Emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇯🇵 and symbols ™ © ® ∑ ∫ √ ≠ ≤ ≥ → "
      "⇒",
      "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
      "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 "
      ": 1;\n}\n",
      "for (let i = 0; i < 10; i++) { console.log(`i=${i}`); } // done\r\n",
      "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
      "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
      "    leading spaces",
      "trailing spaces    ",
      "\t\ttabs\tand\nnewlines\n\n\n   \n",
      "multiple     internal      spaces",
      "\n",
      " ",
      "   ",
      "\r\n\r\n",
      "a\u00a0b\u2009c\u3000d",  // no-break, thin and ideographic spaces
      "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
      "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
      "<|start|>user<|message|>Hi<|end|><|start|>assistant",
      "<think>\nreasoning\n</think>\n\nanswer",
      "3333333333333 12 123 1234 12345 ١٢٣ ௧௨௩",
      "don't can't won't shouldn't I'VE THEY'RE it's",
      "https://example.com/path?query=1&b=2#frag user@example.org",
      "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@",
      "ＡＢＣ ｆｕｌｌｗｉｄｔｈ １２３",
      "e\u0301 combining: a\u0308o\u0308u\u0308 n\u0303",  // decomposed forms (NFC matters)
      "Ⅻ ℃ ﬁ ﬀ ǅ ǈ",
  };
}

// Random strings over assigned code points of many scripts. U+0085 and U+FEFF are left out:
// JavaScript's \s disagrees with Hugging Face's (Oniguruma's) on exactly those two, so the
// JavaScript reference is not a faithful stand-in for Hugging Face there.
inline std::vector<std::string> RandomCorpus(int count, uint32_t seed) {
  static const std::vector<std::pair<char32_t, char32_t>> kRanges = {
      {0x20, 0x7E},     {0x20, 0x7E},       {0x20, 0x7E},       {'\t', '\r'},     {0xA0, 0xFF},
      {0x100, 0x17F},   {0x370, 0x3CE},     {0x400, 0x4FF},     {0x5D0, 0x5EA},   {0x620, 0x64A},
      {0x900, 0x939},   {0xE01, 0xE3A},     {0x1100, 0x1112},   {0x2000, 0x200A}, {0x2010, 0x2027},
      {0x2190, 0x21FF}, {0x3041, 0x3096},   {0x30A1, 0x30FA},   {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3},
      {0xFF01, 0xFF5E}, {0x1F600, 0x1F64F}, {0x1F300, 0x1F5FF}, {0x0300, 0x036F}, {'0', '9'},
  };
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int i = 0; i < count; ++i) {
    const int length = std::uniform_int_distribution<int>(1, 40)(rng);
    std::string text;
    for (int j = 0; j < length; ++j) {
      const auto& [lo, hi] =
          kRanges[std::uniform_int_distribution<size_t>(0, kRanges.size() - 1)(rng)];
      const char32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
      AppendUtf8(cp, &text);
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

}  // namespace moe::testing
