#include "lib/import/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

const std::string kFixture =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-f32/tiny-qwen2moe-f32.gguf";

std::vector<uint8_t> ReadAll(const std::string& path) {
  return testing::ReadArray<uint8_t>(path);
}

TEST(GgufFileTest, ReadsMetadataAndTensorTable) {
  auto g = GgufFile::Open(kFixture);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->version(), 3u);
  EXPECT_EQ(*(*g)->GetString("general.architecture"), "qwen2moe");
  EXPECT_EQ(*(*g)->GetUint("qwen2moe.expert_count"), 16u);
  EXPECT_NEAR(*(*g)->GetFloat("qwen2moe.rope.freq_base"), 1e6, 1e-3);
  auto tokens = (*g)->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 32256u);
  const GgufTensorInfo* t = (*g)->FindTensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne, (std::vector<int64_t>{64, 64, 16}));
  EXPECT_EQ(t->ggml_type, kGgmlF32);
  EXPECT_FALSE((*g)->GetUint("general.architecture").ok());
  EXPECT_EQ((*g)->GetUint("no.such.key").status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufFileTest, MissingFileIsNotFound) {
  auto g = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufFileTest, EveryTruncationIsAnErrorNotACrash) {
  std::vector<uint8_t> bytes = ReadAll(kFixture);
  ASSERT_GT(bytes.size(), 1000u);
  // Cut inside the header at many points: each must be rejected cleanly.

  for (size_t cut = 0; cut < 4096; cut += 7) {
    auto g = GgufFile::Parse(absl::MakeConstSpan(bytes.data(), cut), nullptr);
    EXPECT_FALSE(g.ok()) << "cut at " << cut;
  }
}

TEST(GgufFileTest, CorruptCountsAreRejected) {
  std::vector<uint8_t> bytes = ReadAll(kFixture);
  // Claim an absurd metadata count.
  for (int i = 16; i < 24; ++i) bytes[i] = 0xff;
  auto g = GgufFile::Parse(bytes, nullptr);
  EXPECT_FALSE(g.ok());
  bytes = ReadAll(kFixture);
  bytes[0] = 'X';
  EXPECT_EQ(GgufFile::Parse(bytes, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

// Dimensions each within bounds whose product overflows an element count (2^32 x 2^35: found by
// gguf_fuzz) are an error of the file, not arithmetic the importer trips over.
TEST(GgufFileTest, DimensionsWhoseProductOverflowsAreRejected) {
  std::vector<uint8_t> bytes = ReadAll(kFixture);
  const std::string name = "blk.1.ffn_down_exps.weight";
  const auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(at, bytes.end());
  // After the name: uint32 n_dims, then n_dims uint64 dimensions.
  const size_t dims = (at - bytes.begin()) + name.size() + 4;
  const uint64_t big[] = {uint64_t{1} << 32, uint64_t{1} << 35};
  std::memcpy(bytes.data() + dims, big, sizeof(big));
  auto g = GgufFile::Parse(bytes, nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("2^50 elements"), absl::string_view::npos) << g.status();
}

}  // namespace
}  // namespace moe
