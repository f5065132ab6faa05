// Every supported vocabulary in testdata/tokenizer must reproduce llama.cpp's reference
// tokenizations (Hugging Face output, no BOS, no special-token parsing) exactly, and decode
// back to the input.
#include <cstdio>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/tokenizer.h"
#include "tests/tokenizer/test_vectors.h"

namespace moe {
namespace {

const std::string kDir = std::string(MOE_TESTDATA_DIR) + "/tokenizer/";

class GgufVocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVocabTest, EncodesReferenceVectorsExactly) {
  const std::string base = kDir + "ggml-vocab-" + GetParam() + ".gguf";
  auto data = LoadTokenizerData(base);
  ASSERT_TRUE(data.ok()) << data.status();
  auto tokenizer = Tokenizer::Create(*data);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const auto vectors = testing::ReadTokenizerVectors(base + ".inp", base + ".out");
  ASSERT_FALSE(vectors.empty()) << "no test vectors for " << base;

  int encoded_ok = 0, decoded_ok = 0;
  for (const auto& v : vectors) {
    const std::vector<int32_t> ids = (*tokenizer)->Encode(v.text);
    if (ids == v.ids) {
      ++encoded_ok;
    } else {
      ADD_FAILURE() << GetParam() << ": text \"" << v.text << "\"\n  expected "
                    << ::testing::PrintToString(v.ids) << "\n  got      "
                    << ::testing::PrintToString(ids);
    }
    auto decoded = (*tokenizer)->Decode(v.ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    if (*decoded == v.text) {
      ++decoded_ok;
    } else {
      ADD_FAILURE() << GetParam() << ": decoding the ids of \"" << v.text << "\" gave \""
                    << *decoded << "\"";
    }
  }
  std::printf("[ vocab    ] %-15s encode %d/%zu exact, decode %d/%zu round-trip\n",
              GetParam().c_str(), encoded_ok, vectors.size(), decoded_ok, vectors.size());
}

INSTANTIATE_TEST_SUITE_P(AllSupported, GgufVocabTest,
                         ::testing::Values("llama-spm", "phi-3", "deepseek-coder", "deepseek-llm",
                                           "falcon", "gpt-2", "mpt", "refact", "starcoder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(GgufVocabTest, WordPieceVocabularyIsReportedUnsupported) {
  auto data = LoadTokenizerData(kDir + "ggml-vocab-bert-bge.gguf");
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(data.status().message().find("bert"), std::string::npos) << data.status();
}

}  // namespace
}  // namespace moe
