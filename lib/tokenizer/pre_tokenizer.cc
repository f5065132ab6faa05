#include "lib/tokenizer/pre_tokenizer.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/tokenizer/utf8.h"

namespace moe {
namespace {

// Regex data as llama.cpp's llama-vocab.cpp lists it per pre-tokenizer type (these strings are
// the Hugging Face tokenizers' own Split regexes).
constexpr absl::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr absl::string_view kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr absl::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen3.5's: Qwen2's with combining marks (\p{M}) joining the letters they follow.
constexpr absl::string_view kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]"
    "+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Cased letters (the DeepSeek LLM tokenizer's letter class), written as escapes: typed as
// characters, several (U+1FD3, U+2126, U+212A, ...) would be NFC-normalized by editors into
// other code points and break the ranges.
constexpr absl::string_view kDeepseekLlmLetters =
    "\\s?["
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}-\\x{377}"
    "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}"
    "\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}"
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}"
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"
    "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}"
    "\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"
    "\\x{2183}-\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
    "\\x{2CF2}-\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
    "]+";
constexpr absl::string_view kDeepseekV3Words =
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
constexpr absl::string_view kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Ling / Ring (bailingmoe, bailingmoe2) and LLaDA-MoE: qwen2's with single newlines. The
// tokenizer.json writes two quantifiers possessive; as in llama.cpp they are greedy here, which
// splits alike (neither can give back anything the next element could take).
constexpr absl::string_view kBailing =
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
constexpr absl::string_view kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

using Regexes = std::vector<std::string>;

// Rewrites \s and \S (outside and inside classes) to the White_Space property; ICU's \s is
// only [\t\n\f\r\p{Z}], which misses \v and U+0085 that Oniguruma counts as space.
std::string RewriteWhitespaceClasses(absl::string_view regex) {
  std::string out;
  out.reserve(regex.size());
  for (size_t i = 0; i < regex.size(); ++i) {
    if (regex[i] == '\\' && i + 1 < regex.size()) {
      const char next = regex[i + 1];
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += regex[i];
        out += next;
      }
      ++i;
      continue;
    }
    out += regex[i];
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RegexesForPreTokenizer(absl::string_view pre) {
  auto s = [](absl::string_view v) { return std::string(v); };
  if (pre == "none") return Regexes{};
  if (pre.empty() || pre == "default") {
    return Regexes{"[\\p{P}\\$\\+<=>\\^~\\|]+", s(kGpt2), "\\p{N}+", "[0-9][0-9][0-9]"};
  }
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" ||
      pre == "pixtral" || pre == "lfm2" || pre == "dbrx" || pre == "smaug-bpe" ||
      pre == "chatglm-bpe" ||
      pre == "glm4") {  // GLM-4.5's GGUF files: llama.cpp's CHATGLM4 split, llama3's regex
    return Regexes{s(kLlama3)};
  }
  if (pre == "deepseek-llm") {
    return Regexes{"[\r\n]", s(kDeepseekLlmLetters),     "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
                   "\\s+$",  "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"};
  }
  if (pre == "deepseek-v3") {
    return Regexes{"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", s(kDeepseekV3Words)};
  }
  if (pre == "deepseek-coder") {
    return Regexes{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"};
  }
  if (pre == "falcon") {
    return Regexes{"[\\p{P}\\$\\+<=>\\^~\\|`]+", s(kGpt2), "[0-9][0-9][0-9]"};
  }
  if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" ||
      pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
    return Regexes{"\\p{N}", s(kGpt2)};
  }
  if (pre == "gpt-2" || pre == "phi-2" || pre == "mpt" || pre == "olmo" || pre == "jais" ||
      pre == "roberta-bpe" || pre == "gigachat" || pre == "jina-es" || pre == "jina-de" ||
      pre == "jina-v1-en" || pre == "jina-v2-es" || pre == "jina-v2-de" || pre == "jina-v2-code" ||
      pre == "trillion") {
    return Regexes{s(kGpt2)};
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2" || pre == "megrez" ||
      pre == "hunyuan") {
    return Regexes{s(kQwen2)};
  }
  if (pre == "qwen35") return Regexes{s(kQwen35)};
  if (pre == "tekken") return Regexes{s(kTekken)};
  if (pre == "bailingmoe" || pre == "bailingmoe2" || pre == "llada-moe") {
    return Regexes{s(kBailing)};
  }
  // Kanana-2 (a DeepSeek-V3-architecture MoE), Llama 4 and MiniMax-M2 split as GPT-4o does
  // (llama.cpp's GPT4O).
  if (pre == "gpt-4o" || pre == "kanana2" || pre == "llama4" || pre == "minimax-m2") {
    return Regexes{s(kGpt4o)};
  }
  return absl::UnimplementedError(
      absl::StrCat("byte-level BPE pre-tokenizer '", pre, "' is not supported"));
}

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    const std::vector<std::string>& regexes) {
  std::unique_ptr<PreTokenizer> result(new PreTokenizer());
  for (const std::string& regex : regexes) {
    const std::string rewritten = RewriteWhitespaceClasses(regex);
    UErrorCode status = U_ZERO_ERROR;
    UParseError parse_error;
    std::unique_ptr<icu::RegexPattern> pattern(icu::RegexPattern::compile(
        icu::UnicodeString::fromUTF8(rewritten), 0, parse_error, status));
    if (U_FAILURE(status)) {
      return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex does not compile (",
                                                     u_errorName(status), " at offset ",
                                                     parse_error.offset, "): ", regex));
    }
    result->patterns_.push_back(std::move(pattern));
  }
  return result;
}

std::vector<std::pair<size_t, size_t>> PreTokenizer::Split(absl::string_view text) const {
  std::u16string utf16;
  std::vector<uint32_t> offsets;
  Utf8ToUtf16WithOffsets(text, &utf16, &offsets);
  // Read-only alias: ICU does not copy the buffer.
  const icu::UnicodeString ustr(false, utf16.data(), static_cast<int32_t>(utf16.size()));

  // Pieces as UTF-16 ranges while splitting; converted to byte ranges at the end.
  std::vector<std::pair<int32_t, int32_t>> pieces;
  if (!utf16.empty()) pieces.emplace_back(0, static_cast<int32_t>(utf16.size()));
  std::vector<std::pair<int32_t, int32_t>> next;
  for (const auto& pattern : patterns_) {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> matcher(pattern->matcher(ustr, status));
    if (U_FAILURE(status)) continue;
    // Long single-class runs (1 MB of one letter) need a deep backtrack stack; ICU's default
    // 8 MB limit would end matching early and change the split.
    matcher->setStackLimit(0, status);
    next.clear();
    for (const auto& [begin, end] : pieces) {
      // Each piece is matched on its own: anchors and lookahead stop at its bounds, as when
      // Hugging Face splits a piece string.
      status = U_ZERO_ERROR;
      matcher->region(begin, end, status);
      int32_t pos = begin;
      while (U_SUCCESS(status) && matcher->find(status) && U_SUCCESS(status)) {
        const int32_t start = matcher->start(status);
        const int32_t stop = matcher->end(status);
        if (stop == start) continue;  // empty matches split nothing
        if (start > pos) next.emplace_back(pos, start);
        next.emplace_back(start, stop);
        pos = stop;
      }
      if (pos < end) next.emplace_back(pos, end);
    }
    pieces.swap(next);
  }
  std::vector<std::pair<size_t, size_t>> result;
  result.reserve(pieces.size());
  for (const auto& [begin, end] : pieces) result.emplace_back(offsets[begin], offsets[end]);
  return result;
}

}  // namespace moe
