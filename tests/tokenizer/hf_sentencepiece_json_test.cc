// SentencePiece-style tokenizer.json (Mistral's and Mixtral's files, both the newer normalizer
// form and the older Metaspace form), generated from the llama-spm and phi-3 GGUF vocabularies,
// must encode llama.cpp's reference vectors exactly, decode them back, and agree with the GGUF
// tokenizer on every other text too.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/tokenizer.h"
#include "tests/support/sentencepiece_tokenizer_json.h"
#include "tests/tokenizer/test_vectors.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::SentencePieceJsonForm;

const std::string kDir = std::string(MOE_TESTDATA_DIR) + "/tokenizer/";

struct Param {
  const char* vocab;
  SentencePieceJsonForm form;
};

class SentencePieceJsonTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const std::string gguf = kDir + "ggml-vocab-" + GetParam().vocab + ".gguf";
    auto data = LoadTokenizerData(gguf);
    ASSERT_TRUE(data.ok()) << data.status();
    gguf_data_ = *data;
    auto tokenizer = Tokenizer::Create(gguf_data_);
    ASSERT_TRUE(tokenizer.ok());
    gguf_ = *std::move(tokenizer);
    // With the tokenizer_config.json such repositories ship beside it, naming the special tokens
    // (phi-3 ends text with <|endoftext|>, not with the </s> of its SentencePiece vocabulary).
    dir_ = fs::path(::testing::TempDir()) / ("moe_spm_json_" + std::string(GetParam().vocab) +
                                            std::to_string(static_cast<int>(GetParam().form)));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "tokenizer.json")
        << testing::SentencePieceTokenizerJson(gguf_data_, GetParam().form).dump();
    const nlohmann::json config = {{"bos_token", gguf_data_.tokens[gguf_data_.bos_id]},
                                   {"eos_token", gguf_data_.tokens[gguf_data_.eos_id]},
                                   {"unk_token", gguf_data_.tokens[gguf_data_.unk_id]}};
    std::ofstream(dir_ / "tokenizer_config.json") << config.dump();
    auto json_data = LoadTokenizerData((dir_ / "tokenizer.json").string());
    ASSERT_TRUE(json_data.ok()) << json_data.status();
    json_data_ = *json_data;
    auto json_tokenizer = Tokenizer::Create(json_data_);
    ASSERT_TRUE(json_tokenizer.ok()) << json_tokenizer.status();
    json_ = *std::move(json_tokenizer);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TokenizerData gguf_data_, json_data_;
  std::unique_ptr<Tokenizer> gguf_, json_;
  fs::path dir_;
};

TEST_P(SentencePieceJsonTest, ReadsTheVocabularyAsGgufCarriesIt) {
  EXPECT_EQ(json_data_.model, "llama");
  EXPECT_EQ(json_data_.tokens, gguf_data_.tokens);
  // tokenizer.json knows special added tokens and the unk_token; GGUF splits special pieces into
  // CONTROL and UNKNOWN (phi-3 calls its <unk> CONTROL and its [PAD] pieces UNKNOWN). Both
  // decode to nothing and are never produced from text; as one class, every type agrees.
  auto special_as_one = [](int32_t t) {
    return t == static_cast<int32_t>(TokenType::kUnknown) ? static_cast<int32_t>(TokenType::kControl)
                                                          : t;
  };
  ASSERT_EQ(json_data_.token_types.size(), gguf_data_.token_types.size());
  EXPECT_EQ(json_data_.token_types[gguf_data_.unk_id], static_cast<int32_t>(TokenType::kUnknown));
  int differing = 0;
  for (size_t i = 0; i < gguf_data_.token_types.size(); ++i) {
    if (special_as_one(json_data_.token_types[i]) == special_as_one(gguf_data_.token_types[i])) {
      continue;
    }
    if (++differing <= 5) {
      ADD_FAILURE() << "token " << i << " '" << gguf_data_.tokens[i] << "': type "
                    << json_data_.token_types[i] << ", GGUF says " << gguf_data_.token_types[i];
    }
  }
  EXPECT_EQ(differing, 0);
  EXPECT_EQ(json_data_.bos_id, gguf_data_.bos_id);
  EXPECT_EQ(json_data_.eos_id, gguf_data_.eos_id);
  EXPECT_EQ(json_data_.unk_id, gguf_data_.unk_id);
  EXPECT_TRUE(json_data_.add_bos);  // from the post-processor's template
  EXPECT_TRUE(json_data_.add_space_prefix);
}

TEST_P(SentencePieceJsonTest, EncodesReferenceVectorsExactly) {
  const std::string base = kDir + "ggml-vocab-" + GetParam().vocab + ".gguf";
  const auto vectors = testing::ReadTokenizerVectors(base + ".inp", base + ".out");
  ASSERT_FALSE(vectors.empty());
  int exact = 0;
  for (const auto& v : vectors) {
    const std::vector<int32_t> ids = json_->Encode(v.text);
    EXPECT_EQ(ids, v.ids) << "text \"" << v.text << "\"";
    exact += ids == v.ids;
    auto text = json_->Decode(v.ids);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, v.text);
  }
  std::printf("[ spm json ] %-10s %s: %d/%zu exact\n", GetParam().vocab,
              GetParam().form == SentencePieceJsonForm::kNormalizer ? "normalizer" : "metaspace",
              exact, vectors.size());
}

// Beyond the vectors: texts that stress byte fallback, runs of spaces, special-token markup and
// BOS, each encoded as the GGUF vocabulary encodes it.
TEST_P(SentencePieceJsonTest, AgreesWithTheGgufTokenizerOnOtherTexts) {
  const std::vector<std::string> texts = {
      "",          " ",          "   leading",          "trailing   ",   "a\tb\nc\r\nd",
      "\xf0\x9f\x98\x80 emoji \xe2\x9d\xa4\xef\xb8\x8f", "\xe4\xb8\xad\xe6\x96\x87 and ÄÖÜ",
      "<s> looks special </s>", "<|endoftext|><|user|>", "3.14159 1,000,000 0x1F",
      "\xff\xfe broken utf-8 \xc3", "The quick brown fox jumps over the lazy dog."};
  for (const std::string& t : texts) {
    for (bool bos : {false, true}) {
      for (bool special : {false, true}) {
        EncodeOptions o;
        o.add_bos = bos;
        o.parse_special = special;
        EXPECT_EQ(json_->Encode(t, o), gguf_->Encode(t, o))
            << "\"" << t << "\" bos=" << bos << " special=" << special;
      }
    }
  }
}

// A checkout with nothing but tokenizer.json: BOS from the post-processor's template, EOS the
// SentencePiece </s>.
TEST(SentencePieceJsonAloneTest, SpecialTokensComeFromTheFileItself) {
  auto gguf = LoadTokenizerData(kDir + "ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(gguf.ok());
  const fs::path dir = fs::path(::testing::TempDir()) / "moe_spm_json_alone";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json")
      << testing::SentencePieceTokenizerJson(*gguf, SentencePieceJsonForm::kNormalizer).dump();
  auto data = LoadTokenizerData((dir / "tokenizer.json").string());
  fs::remove_all(dir);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->bos_id, gguf->bos_id);
  EXPECT_EQ(data->eos_id, gguf->eos_id);
  EXPECT_EQ(data->unk_id, gguf->unk_id);
  EXPECT_TRUE(data->add_bos);
}

// What is not SentencePiece-style stays an error that says what it is.
TEST(SentencePieceJsonAloneTest, OtherSpaceConventionsAreRefused) {
  const fs::path dir = fs::path(::testing::TempDir()) / "moe_spm_json_other";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json")
      << R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":null,)"
         R"("normalizer":{"type":"Replace","pattern":{"String":"x"},"content":"y"}})";
  auto data = LoadTokenizerData((dir / "tokenizer.json").string());
  fs::remove_all(dir);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kUnimplemented) << data.status();
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, SentencePieceJsonTest,
    ::testing::Values(Param{"llama-spm", SentencePieceJsonForm::kNormalizer},
                      Param{"llama-spm", SentencePieceJsonForm::kMetaspace},
                      Param{"phi-3", SentencePieceJsonForm::kNormalizer},
                      Param{"phi-3", SentencePieceJsonForm::kMetaspace}),
    [](const auto& info) {
      std::string name = info.param.vocab;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name + (info.param.form == SentencePieceJsonForm::kNormalizer ? "_normalizer"
                                                                            : "_metaspace");
    });

}  // namespace
}  // namespace moe
