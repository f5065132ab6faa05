// Every supported vocabulary in testdata/tokenizer must reproduce llama.cpp's reference
// tokenizations (Hugging Face output, no BOS, no special-token parsing) exactly, and decode
// back to the input.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_writer.h"
#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/pre_tokenizer.h"
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

// Kanana-2's files (DeepSeek-V3 architecture) name GPT-4o's split "kanana2", as llama.cpp reads.
TEST(GgufVocabTest, Kanana2SplitsAsGpt4o) {
  auto kanana2 = RegexesForPreTokenizer("kanana2");
  ASSERT_TRUE(kanana2.ok()) << kanana2.status();
  EXPECT_EQ(*kanana2, *RegexesForPreTokenizer("gpt-4o"));
}

// MiniMax-M2's files name GPT-4o's split "minimax-m2", as llama.cpp reads.
TEST(GgufVocabTest, MinimaxM2SplitsAsGpt4o) {
  auto minimax = RegexesForPreTokenizer("minimax-m2");
  ASSERT_TRUE(minimax.ok()) << minimax.status();
  EXPECT_EQ(*minimax, *RegexesForPreTokenizer("gpt-4o"));
}

// Ling's files (bailingmoe, bailingmoe2) and LLaDA-MoE's name their own split, llama.cpp's
// BAILINGMOE regex: qwen2's but for one newline quantifier, which cannot change a split (a
// whitespace run matched up to its last newline either way). Both split a text alike here,
// pieces and all.
TEST(GgufVocabTest, BailingSplitsAsQwen2Does) {
  const std::string text =
      "Hello, World's 12345 apples!\n\n  \r\n\tIt's  DONE?? ÄÖÜ über 東京 x+y=2\n \n";
  auto qwen2 = PreTokenizer::Create(*RegexesForPreTokenizer("qwen2"));
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  for (const char* name : {"bailingmoe", "bailingmoe2", "llada-moe"}) {
    auto regexes = RegexesForPreTokenizer(name);
    ASSERT_TRUE(regexes.ok()) << name << ": " << regexes.status();
    EXPECT_NE(*regexes, *RegexesForPreTokenizer("qwen2")) << name;
    auto bailing = PreTokenizer::Create(*regexes);
    ASSERT_TRUE(bailing.ok()) << bailing.status();
    EXPECT_EQ((*bailing)->Split(text), (*qwen2)->Split(text)) << name;
    EXPECT_GT((*bailing)->Split(text).size(), 20u);
  }
}

// Qwen3.5's files name their own split "qwen35" (llama.cpp's QWEN35, the regex of the model's
// tokenizer.json): qwen2's with combining marks kept with the letters they follow, where qwen2's
// splits them off as punctuation.
TEST(GgufVocabTest, Qwen35KeepsCombiningMarksWithTheirLetters) {
  const std::string text = "cafe\u0301 nai\u0308ve, it's 42";  // decomposed e-acute, i-diaeresis
  auto qwen35 = PreTokenizer::Create(*RegexesForPreTokenizer("qwen35"));
  auto qwen2 = PreTokenizer::Create(*RegexesForPreTokenizer("qwen2"));
  ASSERT_TRUE(qwen35.ok()) << qwen35.status();
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  auto pieces = [&](const PreTokenizer& p) {
    std::vector<std::string> out;
    for (const auto& [begin, end] : p.Split(text)) out.push_back(text.substr(begin, end - begin));
    return out;
  };
  EXPECT_EQ(pieces(**qwen35), (std::vector<std::string>{"cafe\u0301", " nai\u0308ve", ",", " it",
                                                        "'s", " ", "4", "2"}));
  EXPECT_EQ(pieces(**qwen2), (std::vector<std::string>{"cafe", "\u0301", " nai", "\u0308ve", ",",
                                                       " it", "'s", " ", "4", "2"}));
}

// GLM-4.5's GGUF files name their split "glm4" (llama.cpp's CHATGLM4: llama3's regex) and end a
// tool call with an end-of-message token (tokenizer.ggml.eom_token_id), which also ends
// generation there. A vocabulary file re-labelled so carries both.
TEST(GgufVocabTest, Glm4FilesSplitAsLlama3AndEndGenerationAtTheirEndOfMessage) {
  auto glm4 = RegexesForPreTokenizer("glm4");
  ASSERT_TRUE(glm4.ok()) << glm4.status();
  EXPECT_EQ(*glm4, *RegexesForPreTokenizer("llama3"));

  auto source = GgufFile::Open(kDir + "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(source.ok()) << source.status();
  GgufWriter writer;
  CopyMetadata(**source, writer, [](const std::string& key) {
    return key.rfind("tokenizer.", 0) == 0 && key != "tokenizer.ggml.pre";
  });
  writer.SetString("tokenizer.ggml.pre", "glm4");
  const uint32_t eom = 50200;
  writer.SetU32("tokenizer.ggml.eom_token_id", eom);
  const std::string path =
      ::testing::TempDir() + "/glm4_vocab_" + std::to_string(::getpid()) + ".gguf";
  ASSERT_TRUE(writer.Write(path).ok());
  auto data = LoadTokenizerData(path);
  std::remove(path.c_str());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->pre, "glm4");
  auto tokenizer = Tokenizer::Create(*data);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(eom));
  EXPECT_FALSE((*tokenizer)->IsEndOfGeneration(eom - 1));
  const std::string text = "Hello world 12345 don't";
  EXPECT_EQ(*(*tokenizer)->Decode((*tokenizer)->Encode(text)), text);
}

// LFM2's files name their split "lfm2", which llama.cpp reads as Llama 3's: the same regex,
// whole in-vocabulary pre-tokens kept, and a BOS added unless the file says otherwise.
TEST(GgufVocabTest, Lfm2FilesReadAsLlama3) {
  auto lfm2 = RegexesForPreTokenizer("lfm2");
  ASSERT_TRUE(lfm2.ok()) << lfm2.status();
  EXPECT_EQ(*lfm2, *RegexesForPreTokenizer("llama3"));
  auto source = GgufFile::Open(kDir + "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(source.ok()) << source.status();
  for (const bool says : {false, true}) {
    GgufWriter writer;
    CopyMetadata(**source, writer, [](const std::string& key) {
      return key.rfind("tokenizer.", 0) == 0 && key != "tokenizer.ggml.pre" &&
             key != "tokenizer.ggml.add_bos_token";
    });
    writer.SetString("tokenizer.ggml.pre", "lfm2");
    if (says) writer.SetBool("tokenizer.ggml.add_bos_token", false);
    const std::string path =
        ::testing::TempDir() + "/lfm2_vocab_" + std::to_string(::getpid()) + ".gguf";
    ASSERT_TRUE(writer.Write(path).ok());
    auto data = LoadTokenizerData(path);
    std::remove(path.c_str());
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_TRUE(data->ignore_merges);
    EXPECT_EQ(data->add_bos, !says);
  }
}

// An end-of-generation id past the vocabulary (metadata naming a token the file lacks) is
// dropped, not looked up.
TEST(GgufVocabTest, EndOfGenerationIdsOutsideTheVocabularyAreDropped) {
  auto data = LoadTokenizerData(kDir + "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(data.ok()) << data.status();
  const int32_t n = static_cast<int32_t>(data->tokens.size());
  data->eog_ids = {n - 1, n, n + 1000, -5};
  auto tokenizer = Tokenizer::Create(*data);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(n - 1));
  EXPECT_FALSE((*tokenizer)->IsEndOfGeneration(n));
  EXPECT_EQ((*tokenizer)->data().eog_ids, std::vector<int32_t>{n - 1});
}

}  // namespace
}  // namespace moe
