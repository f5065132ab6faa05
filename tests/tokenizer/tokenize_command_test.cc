// moe-cli tokenize / detokenize on a vocabulary-only GGUF file.
#include "tools/moe-cli/tokenize_command.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

const std::string kVocab = std::string(MOE_TESTDATA_DIR) + "/tokenizer/ggml-vocab-llama-spm.gguf";

int RunCommand(int (*main_fn)(int, char**), std::vector<std::string> args, std::string* out) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  ::testing::internal::CaptureStdout();
  const int rc = main_fn(static_cast<int>(argv.size()), argv.data());
  *out = ::testing::internal::GetCapturedStdout();
  return rc;
}

TEST(TokenizeCommandTest, TokenizesFileAndDetokenizesIds) {
  const std::string path = ::testing::TempDir() + "/moe_tokenize_input.txt";
  std::ofstream(path, std::ios::binary) << "Hello world";
  std::string out;
  ASSERT_EQ(RunCommand(TokenizeMain, {"tokenize", "-m", kVocab, "--file", path}, &out), 0);
  EXPECT_EQ(out, "15043 3186\n");
  ASSERT_EQ(RunCommand(TokenizeMain, {"tokenize", "-m", kVocab, "--file", path, "--add-bos"}, &out),
            0);
  EXPECT_EQ(out, "1 15043 3186\n");
  ASSERT_EQ(RunCommand(DetokenizeMain, {"detokenize", "-m", kVocab, "--ids", "15043 3186"}, &out),
            0);
  EXPECT_EQ(out, "Hello world\n");
}

TEST(TokenizeCommandTest, RejectsBadInput) {
  std::string out;
  EXPECT_NE(RunCommand(DetokenizeMain, {"detokenize", "-m", kVocab, "--ids", "1 99999999"}, &out),
            0);
  EXPECT_NE(RunCommand(DetokenizeMain, {"detokenize", "-m", kVocab, "--ids", "x"}, &out), 0);
  EXPECT_NE(RunCommand(TokenizeMain, {"tokenize", "-m", kVocab}, &out), 0);
  EXPECT_NE(
      RunCommand(TokenizeMain, {"tokenize", "-m", "/nonexistent.gguf", "--file", kVocab}, &out), 0);
}

}  // namespace
}  // namespace moe
