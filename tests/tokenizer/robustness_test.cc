// Hostile inputs: invalid UTF-8, NUL bytes, 1 MB of one character, nothing but special-token
// markup, out-of-range ids. Nothing may crash or hang, and byte-level / byte-fallback
// vocabularies must round-trip any bytes exactly.
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/stream_decoder.h"
#include "lib/tokenizer/tokenizer.h"
#include "lib/tokenizer/utf8.h"

namespace moe {
namespace {

struct VocabCase {
  const char* name;
  // Whether any byte string round-trips. DeepSeek's vocabularies carry some byte-level
  // characters ("ÿ", "À", ...) only as user-defined added tokens, which decode as their text:
  // a lone invalid byte 0xFF then comes back as "ÿ" (Hugging Face cannot take such input at
  // all). Valid UTF-8 round-trips for every vocabulary.
  bool invalid_bytes_round_trip;
  // Whether every byte has a token. Falcon's vocabulary lacks some (rare control bytes and
  // lead bytes of 4-byte characters), which are dropped as Hugging Face drops them.
  bool byte_complete = true;
};

// SentencePiece and byte-level vocabularies with different pre-tokenizers.
class RobustnessTest : public ::testing::TestWithParam<VocabCase> {
 protected:
  void SetUp() override {
    const std::string path =
        std::string(MOE_TESTDATA_DIR) + "/tokenizer/ggml-vocab-" + GetParam().name + ".gguf";
    auto data = LoadTokenizerData(path);
    ASSERT_TRUE(data.ok()) << data.status();
    auto tokenizer = Tokenizer::Create(*data);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
  }

  void ExpectRoundTrip(const std::string& text, bool exact = true) {
    const std::vector<int32_t> ids = tokenizer_->Encode(text);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tokenizer_->vocab_size()) << id;
    auto decoded = tokenizer_->Decode(ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    if (exact) {
      EXPECT_EQ(*decoded, text);
    }
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

bool IsValidUtf8(const std::string& text) {
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const size_t len = DecodeUtf8(text, pos, &cp);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

TEST_P(RobustnessTest, InvalidUtf8IsEncoded) {
  const bool exact = GetParam().invalid_bytes_round_trip;
  ExpectRoundTrip("\xff\xfe\x80\xc0\xaf abc \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82", exact);
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(std::uniform_int_distribution<int>(1, 64)(rng), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    ExpectRoundTrip(bytes, exact);
  }
}

TEST_P(RobustnessTest, RandomValidUtf8RoundTrips) {
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(1, 32)(rng);
    for (int j = 0; j < length; ++j) {
      char32_t cp;
      do {
        cp = std::uniform_int_distribution<uint32_t>(1, rng() % 4 == 0 ? 0x10FFFF : 0x7FF)(rng);
      } while (cp >= 0xD800 && cp <= 0xDFFF);
      AppendUtf8(cp, &text);
    }
    ExpectRoundTrip(text, GetParam().byte_complete);
  }
}

TEST_P(RobustnessTest, NulBytesRoundTrip) {
  ExpectRoundTrip(std::string("a\0b\0\0c", 6));
  ExpectRoundTrip(std::string(1000, '\0'));
}

TEST_P(RobustnessTest, OneMegabyteOfOneCharacterIsFast) {
  for (const std::string& unit : {std::string("a"), std::string(" "), std::string("\n"),
                                  std::string("7"), std::string("好"), std::string("!")}) {
    std::string text;
    while (text.size() < (1 << 20)) text += unit;
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tokenizer_->Encode(text);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 10.0) << "1 MB of '" << unit << "'";
    EXPECT_FALSE(ids.empty());
    auto decoded = tokenizer_->Decode(ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_TRUE(*decoded == text) << "1 MB of '" << unit << "' does not round-trip";
  }
}

TEST_P(RobustnessTest, OnlySpecialTokenMarkup) {
  std::string markup;
  for (int i = 0; i < 1000; ++i) {
    markup += tokenizer_->data().tokens[tokenizer_->bos_id() >= 0 ? tokenizer_->bos_id() : 0];
    markup += tokenizer_->data().tokens[tokenizer_->eos_id() >= 0 ? tokenizer_->eos_id() : 0];
  }
  EncodeOptions special;
  special.parse_special = true;
  const std::vector<int32_t> parsed = tokenizer_->Encode(markup, special);
  EXPECT_FALSE(parsed.empty());
  // Without parse_special the markup is plain text and must round-trip as such.
  ExpectRoundTrip(markup);
}

TEST_P(RobustnessTest, OutOfRangeIdsAreErrors) {
  for (int32_t id : {-1, tokenizer_->vocab_size(), INT32_MAX, INT32_MIN}) {
    const std::vector<int32_t> ids = {1, id};
    EXPECT_EQ(tokenizer_->Decode(ids).status().code(), absl::StatusCode::kOutOfRange);
    StreamDecoder stream(*tokenizer_);
    EXPECT_EQ(stream.Add(id).status().code(), absl::StatusCode::kOutOfRange);
  }
}

TEST_P(RobustnessTest, StreamDecoderYieldsValidUtf8AndTheWholeText) {
  const std::string text =
      " Hello 世界! 👨‍👩‍👧 émoji 🎉 and ελληνικά\n\tend";
  const std::vector<int32_t> ids = tokenizer_->Encode(text);
  StreamDecoder stream(*tokenizer_);
  std::string streamed;
  for (int32_t id : ids) {
    auto piece = stream.Add(id);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_TRUE(IsValidUtf8(*piece));
    streamed += *piece;
  }
  streamed += stream.Flush();
  EXPECT_EQ(streamed, text);
}

TEST_P(RobustnessTest, StreamDecoderReplacesBrokenBytes) {
  // "\xe4\xb8" is an incomplete 3-byte character: held back, then U+FFFD on flush.
  std::vector<int32_t> ids = tokenizer_->Encode("a\xe4\xb8");
  StreamDecoder stream(*tokenizer_);
  std::string streamed;
  for (int32_t id : ids) streamed += *stream.Add(id);
  EXPECT_TRUE(IsValidUtf8(streamed));
  streamed += stream.Flush();
  EXPECT_EQ(streamed, "a\xEF\xBF\xBD");
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RobustnessTest,
                         ::testing::Values(VocabCase{"llama-spm", true}, VocabCase{"phi-3", true},
                                           VocabCase{"gpt-2", true},
                                           VocabCase{"falcon", false, false},
                                           VocabCase{"deepseek-llm", false},
                                           VocabCase{"deepseek-coder", false}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace moe
