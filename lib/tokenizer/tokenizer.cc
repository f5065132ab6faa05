#include "lib/tokenizer/tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/tokenizer/byte_unicode.h"
#include "lib/tokenizer/utf8.h"

namespace moe {
namespace {

constexpr absl::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

// End-of-turn tokens by name, most specific first (used when the metadata names none).
constexpr std::initializer_list<absl::string_view> kEotNames = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<EOT>",      "_<EOT>",  "<｜end▁of▁sentence｜>"};
// Tokens that end generation besides EOS/EOT.
constexpr std::initializer_list<absl::string_view> kEogNames = {
    "<|eot_id|>",           "<|im_end|>",    "<|end|>",    "<|return|>", "<|call|>",
    "<end_of_turn>",        "<|endoftext|>", "<|eom_id|>", "<EOT>",      "_<EOT>",
    "<｜end▁of▁sentence｜>"};

// "<0xAB>" -> 0xAB, or -1.
int ParseByteToken(absl::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

// NFC of text; invalid UTF-8 bytes become U+FFFD (Hugging Face cannot take them at all).
std::string NormalizeNfc(absl::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) return std::string(text);
  const icu::UnicodeString input = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (nfc->isNormalized(input, status) && U_SUCCESS(status)) {
    // Already NFC: keep the original bytes (they may include invalid UTF-8).
    return std::string(text);
  }
  status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = nfc->normalize(input, status);
  if (U_FAILURE(status)) return std::string(text);
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(const TokenizerData& data) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(data));
  MOE_RETURN_IF_ERROR(tokenizer->Init());
  return tokenizer;
}

absl::Status Tokenizer::Init() {
  if (data_.model == "llama") {
    spm_ = true;
  } else if (data_.model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer model '", data_.model,
        "' is not supported (supported: 'llama' SentencePiece-style BPE, 'gpt2' byte-level BPE)"));
  }
  const size_t n = data_.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) return absl::InvalidArgumentError("too many tokens");
  if (!data_.scores.empty() && data_.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer has ", data_.scores.size(), " scores for ", n, " tokens"));
  }
  if (!data_.token_types.empty() && data_.token_types.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", data_.token_types.size(),
                                                   " token types for ", n, " tokens"));
  }
  for (int32_t* id : {&data_.bos_id, &data_.eos_id, &data_.eot_id, &data_.unk_id, &data_.pad_id}) {
    if (*id >= static_cast<int64_t>(n)) *id = -1;  // metadata naming a missing token: none
  }
  std::erase_if(data_.eog_ids, [n](int32_t id) { return id < 0 || id >= static_cast<int64_t>(n); });

  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (data_.tokens[i].empty()) continue;
    token_to_id_[data_.tokens[i]] = static_cast<int32_t>(i);  // later duplicates win (llama.cpp)
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = TokenType(static_cast<int32_t>(i));
    if (type == static_cast<int32_t>(TokenType::kControl) ||
        type == static_cast<int32_t>(TokenType::kUnknown)) {
      specials_.Add(data_.tokens[i], static_cast<int32_t>(i), /*always=*/false);
    } else if (type == static_cast<int32_t>(TokenType::kUserDefined)) {
      specials_.Add(data_.tokens[i], static_cast<int32_t>(i), /*always=*/true);
    }
  }

  byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const std::string key = spm_ ? absl::StrFormat("<0x%02X>", b) : ByteToUnicodeTable()[b];
    auto it = token_to_id_.find(key);
    if (it != token_to_id_.end()) byte_ids_[b] = it->second;
  }

  if (!spm_) {
    merges_.reserve(data_.merges.size());
    for (size_t rank = 0; rank < data_.merges.size(); ++rank) {
      const std::string& merge = data_.merges[rank];
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) continue;
      const absl::string_view left = absl::string_view(merge).substr(0, space);
      const absl::string_view right = absl::string_view(merge).substr(space + 1);
      auto l = token_to_id_.find(left), r = token_to_id_.find(right);
      auto m = token_to_id_.find(absl::StrCat(left, right));
      // A merge whose parts or result are not tokens can never fire in a valid vocabulary.
      if (l == token_to_id_.end() || r == token_to_id_.end() || m == token_to_id_.end()) continue;
      merges_.try_emplace(MergeKey(l->second, r->second),
                          RankedMerge{static_cast<int32_t>(rank), m->second});
    }
    std::vector<std::string> regexes = data_.pre_regexes;
    if (regexes.empty()) {
      MOE_ASSIGN_OR_RETURN(regexes, RegexesForPreTokenizer(data_.pre));
    }
    MOE_ASSIGN_OR_RETURN(pre_tokenizer_, PreTokenizer::Create(regexes));
  }
  if (!data_.normalizer.empty() && data_.normalizer != "NFC") {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer normalizer '", data_.normalizer, "' is not supported"));
  }

  eot_id_ = data_.eot_id;
  for (absl::string_view name : kEotNames) {
    if (eot_id_ >= 0) break;
    auto it = token_to_id_.find(name);
    if (it != token_to_id_.end()) eot_id_ = it->second;
  }
  if (data_.eos_id >= 0) eog_ids_.insert(data_.eos_id);
  if (eot_id_ >= 0) eog_ids_.insert(eot_id_);
  eog_ids_.insert(data_.eog_ids.begin(), data_.eog_ids.end());
  // Harmony (GPT-OSS) ends a message with <|end|> but generation with <|return|>/<|call|>.
  const bool harmony = token_to_id_.contains("<|return|>");
  for (absl::string_view name : kEogNames) {
    if (harmony && name == "<|end|>") continue;
    auto it = token_to_id_.find(name);
    if (it != token_to_id_.end() && IsControl(it->second)) eog_ids_.insert(it->second);
  }
  return absl::OkStatus();
}

int32_t Tokenizer::TokenType(int32_t id) const {
  if (!data_.token_types.empty()) return data_.token_types[id];
  if (spm_ && ParseByteToken(data_.tokens[id]) >= 0) return static_cast<int32_t>(TokenType::kByte);
  return static_cast<int32_t>(TokenType::kNormal);
}

bool Tokenizer::IsControl(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const int32_t type = TokenType(id);
  return type == static_cast<int32_t>(TokenType::kControl) ||
         type == static_cast<int32_t>(TokenType::kUnknown);
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> out;
  if (options.add_bos && data_.add_bos && data_.bos_id >= 0) out.push_back(data_.bos_id);
  std::vector<SpecialTokenMatcher::Segment> segments;
  if (specials_.empty()) {
    if (!text.empty()) segments.push_back({0, text.size(), -1});
  } else {
    segments = specials_.Partition(text, options.parse_special);
  }
  // SentencePiece puts the space marker before text that starts the input or follows a
  // special token (llama.cpp / sentencepiece behaviour).
  bool after_special = true;
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      out.push_back(segment.id);
      after_special = true;
      continue;
    }
    absl::string_view piece = text.substr(segment.begin, segment.end - segment.begin);
    std::string normalized;
    if (data_.normalizer == "NFC") {
      normalized = NormalizeNfc(piece);
      piece = normalized;
    }
    if (spm_) {
      EncodeSpm(piece, data_.add_space_prefix && after_special, &out);
    } else {
      EncodeByteLevel(piece, &out);
    }
    after_special = false;
  }
  if (options.add_bos && data_.add_eos && data_.eos_id >= 0) out.push_back(data_.eos_id);
  return out;
}

void Tokenizer::EncodeSpm(absl::string_view text, bool prefix_space,
                          std::vector<int32_t>* out) const {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 4 + 3);
  if (prefix_space) escaped.append(kSpaceMarker.data(), kSpaceMarker.size());
  for (char c : text) {
    if (c == ' ') {
      escaped.append(kSpaceMarker.data(), kSpaceMarker.size());
    } else {
      escaped += c;
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> symbols;
  MergeByScore(escaped, token_to_id_, data_.scores, &symbols);
  for (const auto& [begin, len] : symbols) {
    const absl::string_view symbol = absl::string_view(escaped).substr(begin, len);
    auto it = token_to_id_.find(symbol);
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      continue;
    }
    for (char c : symbol) {  // byte fallback
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        out->push_back(id);
      } else if (data_.unk_id >= 0) {
        out->push_back(data_.unk_id);
      }
    }
  }
}

void Tokenizer::EncodeByteLevel(absl::string_view text, std::vector<int32_t>* out) const {
  std::string prefixed;
  if (data_.add_space_prefix && !text.empty() && text[0] != ' ') {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  for (const auto& [begin, end] : pre_tokenizer_->Split(text)) {
    EncodeByteLevelWord(text.substr(begin, end - begin), out);
  }
}

void Tokenizer::EncodeByteLevelWord(absl::string_view word, std::vector<int32_t>* out) const {
  if (data_.ignore_merges) {
    std::string mapped;
    mapped.reserve(word.size() * 2);
    for (char c : word) mapped += ByteToUnicodeTable()[static_cast<uint8_t>(c)];
    auto it = token_to_id_.find(mapped);
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids(word.size());
  for (size_t i = 0; i < word.size(); ++i) ids[i] = byte_ids_[static_cast<uint8_t>(word[i])];
  const size_t first = out->size();
  MergeByRank(merges_, ids, out);
  // A byte without a token of its own (never in a complete byte-level vocabulary) becomes UNK
  // or is dropped, as Hugging Face does without byte fallback.
  size_t kept = first;
  for (size_t i = first; i < out->size(); ++i) {
    int32_t id = (*out)[i];
    if (id < 0) id = data_.unk_id;
    if (id >= 0) (*out)[kept++] = id;
  }
  out->resize(kept);
}

absl::StatusOr<std::string> Tokenizer::TokenToPiece(int32_t id,
                                                    const DecodeOptions& options) const {
  if (id < 0 || id >= vocab_size()) {
    return absl::OutOfRangeError(
        absl::StrCat("token id ", id, " is outside the vocabulary (size ", vocab_size(), ")"));
  }
  const std::string& text = data_.tokens[id];
  const int32_t type = TokenType(id);
  if (type == static_cast<int32_t>(TokenType::kControl) ||
      type == static_cast<int32_t>(TokenType::kUnknown)) {
    return options.render_special ? text : std::string();
  }
  if (type == static_cast<int32_t>(TokenType::kUserDefined)) return text;
  if (spm_) {
    if (type == static_cast<int32_t>(TokenType::kByte)) {
      const int byte = ParseByteToken(text);
      if (byte >= 0) return std::string(1, static_cast<char>(byte));
    }
    std::string piece;
    piece.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
      if (absl::string_view(text).substr(pos, 3) == kSpaceMarker) {
        piece += ' ';
        pos += 3;
      } else {
        piece += text[pos++];
      }
    }
    return piece;
  }
  std::string piece;
  piece.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const size_t len = DecodeUtf8(text, pos, &cp);
    if (len == 0) {  // not valid UTF-8: keep the byte
      piece += text[pos++];
      continue;
    }
    const int byte = UnicodeToByte(cp);
    if (byte >= 0) {
      piece += static_cast<char>(byte);
    } else {
      piece.append(text, pos, len);
    }
    pos += len;
  }
  return piece;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              const DecodeOptions& options) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    MOE_ASSIGN_OR_RETURN(std::string piece, TokenToPiece(ids[i], options));
    // The space SentencePiece put before the text is dropped once, from the first token.
    if (i == 0 && strips_leading_space() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    out += piece;
  }
  return out;
}

}  // namespace moe
