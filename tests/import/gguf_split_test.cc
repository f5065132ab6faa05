// Models split by llama.cpp's gguf-split load from the first split's path as the whole file does:
// the same tensors, llama.cpp's reference logits, the expert cache reading experts from every
// split; a wrong, missing or mismatched split is an error naming the file.
#include "lib/import/gguf_split.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_import.h"
#include "lib/import/gguf_writer.h"
#include "lib/model/model.h"
#include "tests/support/expert_cache_logits.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/fixture_reference.h"
#include "tests/support/gguf_split_writer.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using ::moe::testing::FixtureDir;
using ::moe::testing::FixtureGgufNamed;
using ::moe::testing::RemoveSplits;
using ::moe::testing::SplitOptions;
using ::moe::testing::SplitPath;
using ::moe::testing::WriteSplits;

TEST(GgufSplitTest, ASplitModelImportsAsTheWholeFile) {
  for (const std::string name : {"tiny-qwen3moe-f32", "tiny-deepseek3-q8_0"}) {
    SCOPED_TRACE(name);
    const std::string prefix = ::moe::testing::TempFilePath("gguf_split_test_" + name).string();
    const SplitOptions o{.count = 3, .tensors_in_first = name == "tiny-qwen3moe-f32"};
    ASSERT_TRUE(WriteSplits(FixtureGgufNamed(name), prefix, o).ok());
    auto whole = ImportGguf(FixtureGgufNamed(name));
    auto split = ImportGguf(SplitPath(prefix, 1, 3));
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_TRUE(split->hp == whole->hp);
    EXPECT_EQ(split->source_files.size(), 3u);
    ASSERT_EQ(split->tensors.size(), whole->tensors.size());
    for (const TensorSpec& want : whole->tensors) {
      const TensorSpec* got = split->Find(want.name);
      ASSERT_NE(got, nullptr) << want.name;
      ASSERT_EQ(got->data.size(), want.data.size()) << want.name;
      EXPECT_EQ(std::memcmp(got->data.data(), want.data.data(), want.data.size()), 0) << want.name;
    }
    auto model = Model::Create(*std::move(split));
    ASSERT_TRUE(model.ok()) << model.status();
    if (fs::exists(FixtureDir(name) / "p1.deq.gen_tokens.txt")) {
      ::moe::testing::CheckAgainstFixture(FixtureDir(name), *model, {".deq", false, true}, 2);
    } else {
      ::moe::testing::CheckAgainstFixture(FixtureDir(name), *model, {"", true, true}, 2);
    }
    RemoveSplits(prefix, 3);
  }
}

// The expert cache reads each expert from the split that holds it.
TEST(GgufSplitTest, TheExpertCacheReadsFromEverySplit) {
  const std::string name = "tiny-qwen3moe-f32";
  const std::string prefix = ::moe::testing::TempFilePath("gguf_split_test_cache").string();
  ASSERT_TRUE(WriteSplits(FixtureGgufNamed(name), prefix, {.count = 4}).ok());
  const std::vector<float> want =
      ::moe::testing::FixturePromptLogits(FixtureGgufNamed(name), name, 0);
  const std::vector<float> got =
      ::moe::testing::FixturePromptLogits(SplitPath(prefix, 1, 4), name, 0.25);
  RemoveSplits(prefix, 4);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want);
}

TEST(GgufSplitTest, AWrongMissingOrMismatchedSplitIsAnErrorNamingIt) {
  const std::string src = FixtureGgufNamed("tiny-qwen3moe-f32");
  const std::string prefix = ::moe::testing::TempFilePath("gguf_split_test_bad").string();
  auto error_of = [](const std::string& path) { return ImportGguf(path).status(); };

  ASSERT_TRUE(WriteSplits(src, prefix).ok());
  absl::Status s = error_of(SplitPath(prefix, 2, 3));  // not the first
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "-00001-of-00003.gguf")) << s;

  fs::remove(SplitPath(prefix, 3, 3));  // missing
  s = error_of(SplitPath(prefix, 1, 3));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), SplitPath(prefix, 3, 3))) << s;
  RemoveSplits(prefix, 3);

  ASSERT_TRUE(WriteSplits(src, prefix, {.tensor_count_change = 1}).ok());
  s = error_of(SplitPath(prefix, 1, 3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  RemoveSplits(prefix, 3);

  ASSERT_TRUE(WriteSplits(src, prefix, {.duplicate_a_tensor = true}).ok());
  s = error_of(SplitPath(prefix, 1, 3));
  EXPECT_TRUE(absl::StrContains(s.message(), "more than one split")) << s;
  RemoveSplits(prefix, 3);

  // A split of another model's split in its place (it says 2 of 2).
  ASSERT_TRUE(WriteSplits(src, prefix).ok());
  const std::string other = ::moe::testing::TempFilePath("gguf_split_test_other").string();
  ASSERT_TRUE(WriteSplits(src, other, {.count = 2}).ok());
  fs::rename(SplitPath(other, 2, 2), SplitPath(prefix, 2, 3));
  s = error_of(SplitPath(prefix, 1, 3));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "another split")) << s;
  RemoveSplits(prefix, 3);
  RemoveSplits(other, 2);

  // A first split renamed so that the others cannot be found by its name.
  ASSERT_TRUE(WriteSplits(src, prefix).ok());
  const std::string renamed = prefix + "-renamed.gguf";
  fs::rename(SplitPath(prefix, 1, 3), renamed);
  s = error_of(renamed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  fs::remove(renamed);
  RemoveSplits(prefix, 3);
}

}  // namespace
}  // namespace moe
