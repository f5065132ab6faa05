#include "lib/import/sentencepiece_tokenizer.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/tokenizer/tokenizer_data.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kBundled = std::string(MOE_SOURCE_DIR) + "/models/tiny-brown-moe/tokenizer.model";

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const fs::path dir = fs::path(::testing::TempDir()) / "sentencepiece_tokenizer_test";
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

uint64_t Varint(const std::string& b, size_t* i) {
  uint64_t v = 0;
  for (int shift = 0; *i < b.size(); shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[(*i)++]);
    v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (c < 0x80) break;
  }
  return v;
}

// Where the value of the n-th occurrence of protobuf field `field` lies within [begin, end) of
// `b` (a length-delimited value: after its length), with its length (a varint: 1).
struct Value {
  size_t offset = 0, length = 0;
};
Value FindField(const std::string& b, Value within, uint64_t field, int n) {
  size_t i = within.offset;
  while (i < within.offset + within.length) {
    const uint64_t key = Varint(b, &i);
    Value value{i, 1};
    switch (key & 7) {
      case 0:
        Varint(b, &i);
        break;
      case 1:
        i += 8;
        break;
      case 2:
        value.length = Varint(b, &i);
        value.offset = i;
        i += value.length;
        break;
      case 5:
        i += 4;
        break;
      default:
        ADD_FAILURE() << "unexpected wire type " << (key & 7);
        return {};
    }
    if ((key >> 3) == field && n-- == 0) return value;
  }
  ADD_FAILURE() << "no field " << field << " left";
  return {};
}

TEST(SentencePieceTokenizerTest, ReadsTheBundledModel) {
  auto data = TokenizerDataFromSentencePiece(kBundled);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->model, "llama");
  EXPECT_EQ(data->tokens.size(), 4000u);  // config.json's vocab_size
  EXPECT_EQ(data->token_types.size(), data->tokens.size());
  EXPECT_EQ(data->tokens[data->unk_id], "<unk>");
}

// Found by sentencepiece_model_fuzz: in a unigram model, a piece that starts with a NUL byte
// passes the library's checks, then its trie builder throws ("zero-length key"); that must come
// back as an error, not end the process.
TEST(SentencePieceTokenizerTest, PieceStartingWithNulIsAnErrorNotAnAbort) {
  std::string model = ReadBytes(kBundled);
  ASSERT_FALSE(model.empty());
  const Value whole{0, model.size()};
  // ModelProto.trainer_spec (2).model_type (3): BPE (2) -> UNIGRAM (1).
  const Value model_type = FindField(model, FindField(model, whole, 2, 0), 3, 0);
  ASSERT_EQ(model[model_type.offset], 2);
  model[model_type.offset] = 1;
  ASSERT_TRUE(TokenizerDataFromSentencePiece(WriteTemp("unigram.model", model)).ok());
  // ModelProto.pieces (1)[1000].piece (1), a normal piece: its first byte NUL.
  const Value piece = FindField(model, FindField(model, whole, 1, 1000), 1, 0);
  ASSERT_GT(piece.length, 0u);
  model[piece.offset] = '\0';
  auto data = TokenizerDataFromSentencePiece(WriteTemp("nul-piece.model", model));
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(), HasSubstr("zero-length key")) << data.status();
}

TEST(SentencePieceTokenizerTest, TruncatedOrMissingFileIsAnError) {
  const std::string model = ReadBytes(kBundled);
  auto truncated =
      TokenizerDataFromSentencePiece(WriteTemp("truncated.model", model.substr(0, 1001)));
  EXPECT_FALSE(truncated.ok());
  auto missing = TokenizerDataFromSentencePiece(WriteTemp("x", "") + ".absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(".absent"));
}

}  // namespace
}  // namespace moe
