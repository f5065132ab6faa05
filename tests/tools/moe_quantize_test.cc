// moe-quantize re-encodes the fixtures' F32 models exactly as llama-quantize did: the Q8_0 and
// Q4_0 fixture files hold llama-quantize's output for the same weights.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "lib/import/gguf_file.h"
#include "tests/support/gguf_split_writer.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(MOE_TESTDATA_DIR) / "fixtures";
const fs::path kFixturesV2 = fs::path(MOE_TESTDATA_DIR) / "fixtures-v2";

void ExpectSameTensors(const std::string& ours, const std::string& theirs) {
  auto a = GgufFile::Open(ours);
  auto b = GgufFile::Open(theirs);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
  int compared = 0;
  for (const GgufTensorInfo& t : (*b)->tensors()) {
    const GgufTensorInfo* u = (*a)->FindTensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->ggml_type, t.ggml_type) << t.name << ": " << GgmlTypeName(u->ggml_type) << " vs "
                                         << GgmlTypeName(t.ggml_type);
    EXPECT_EQ(u->ne, t.ne) << t.name;
    if (u->ggml_type != t.ggml_type) continue;
    auto type = DTypeFromGgml(t.ggml_type, t.name);
    ASSERT_TRUE(type.ok());
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    size_t size = RowBytes(*type, t.ne[0]) * rows;
    EXPECT_EQ(0, std::memcmp(u->data.data(), t.data.data(), size)) << t.name << " differs";
    ++compared;
  }
  EXPECT_GT(compared, 10);
  EXPECT_EQ(*(*a)->GetString("general.architecture"), *(*b)->GetString("general.architecture"));
  EXPECT_EQ((*a)->GetStringArray("tokenizer.ggml.tokens")->size(),
            (*b)->GetStringArray("tokenizer.ggml.tokens")->size());
}

std::string Quantize(const std::string& name, const std::string& scheme,
                     const fs::path& fixtures = kFixtures) {
  std::string out = (fs::temp_directory_path() / (name + "." + scheme + ".gguf")).string();
  std::string cmd = std::string(MOE_BINARY_DIR) + "/tools/moe-quantize " +
                    (fixtures / name / (name + ".gguf")).string() + " " + out + " " + scheme;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out;
}

TEST(MoeQuantizeTest, Q8_0MatchesLlamaQuantizeByteForByte) {
  std::string out = Quantize("tiny-llama-moe-f32", "q8_0");
  ExpectSameTensors(out, (kFixtures / "tiny-llama-moe-q8_0" / "tiny-llama-moe-q8_0.gguf").string());
  fs::remove(out);
}

// A model split by gguf-split is read from all its files (named by the first) and written as one.
TEST(MoeQuantizeTest, ASplitModelIsQuantizedWhole) {
  const std::string name = "tiny-llama-moe-f32";
  const std::string prefix = testing::TempFilePath("moe_quantize_test_split").string();
  ASSERT_TRUE(testing::WriteSplits((kFixtures / name / (name + ".gguf")).string(), prefix).ok());
  const std::string out =
      (fs::temp_directory_path() / "moe_quantize_test_split.q8_0.gguf").string();
  const std::string cmd = std::string(MOE_BINARY_DIR) + "/tools/moe-quantize " +
                          testing::SplitPath(prefix, 1, 3) + " " + out + " q8_0";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  testing::RemoveSplits(prefix, 3);
  ExpectSameTensors(out, (kFixtures / "tiny-llama-moe-q8_0" / "tiny-llama-moe-q8_0.gguf").string());
  auto written = GgufFile::Open(out);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ((*written)->Find("split.count"), nullptr);
  fs::remove(out);
}

TEST(MoeQuantizeTest, Q4_0MatchesLlamaQuantizeByteForByte) {
  std::string out = Quantize("tiny-qwen2moe-f32", "q4_0");
  ExpectSameTensors(out,
                    (kFixtures / "tiny-qwen2moe-q4_0" / "tiny-qwen2moe-q4_0.gguf").string());
  fs::remove(out);
}

// llama-quantize's MXFP4_MOE: MXFP4 routed experts (its E8M0 scale and nearest-code choice),
// Q8_0 for the other matrices, biases, sinks and the router left in F32.
TEST(MoeQuantizeTest, Mxfp4MoeMatchesLlamaQuantizeByteForByte) {
  std::string out = Quantize("tiny-gptoss-f32", "mxfp4_moe", kFixturesV2);
  ExpectSameTensors(out, (kFixturesV2 / "tiny-gptoss-mxfp4" / "tiny-gptoss-mxfp4.gguf").string());
  auto ours = GgufFile::Open(out);
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_EQ((*ours)->GetUint("general.file_type").value_or(0), 38u);
  fs::remove(out);
}

TEST(MoeQuantizeTest, BadInputFailsCleanly) {
  std::string bin = std::string(MOE_BINARY_DIR) + "/tools/moe-quantize ";
  EXPECT_NE(std::system((bin + "/no/such.gguf /tmp/x.gguf q8_0 2>/dev/null").c_str()), 0);
  EXPECT_NE(std::system((bin + (kFixtures / "README.md").string() + " /tmp/x.gguf q8_0 2>/dev/null").c_str()), 0);
  int status = std::system((bin + "/no/such.gguf /tmp/x.gguf q3_z 2>/dev/null").c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

}  // namespace
}  // namespace moe
