// GgufWriter's deferred tensors: made as the file is written, the same bytes as tensors handed
// over whole; a producer's failure leaves no file and names the tensor.
#include "lib/import/gguf_writer.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return testing::TempFilePath("gguf_writer_" + name).string();
}

// Two tensors of odd sizes (so that the padding between them matters), as bytes.
struct Tensors {
  std::vector<uint8_t> a = std::vector<uint8_t>(4 * 3 * 5), b = std::vector<uint8_t>(4 * 7);
  Tensors() {
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + 1);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13 + 5);
  }
};

GgufWriter::Producer CopyOf(const std::vector<uint8_t>& bytes, int* calls) {
  return [&bytes, calls](absl::Span<uint8_t> out) {
    ++*calls;
    if (out.size() != bytes.size()) return absl::InternalError("wrong size asked for");
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return absl::OkStatus();
  };
}

TEST(GgufWriterTest, DeferredTensorsWriteTheSameFile) {
  const Tensors t;
  GgufWriter whole, deferred;
  for (GgufWriter* w : {&whole, &deferred}) w->SetString("general.architecture", "llama");
  whole.AddTensor("a", DType::kF32, {3, 5}, t.a);
  whole.AddTensor("b", DType::kF32, {7}, t.b);
  int calls = 0;
  deferred.AddTensor("a", DType::kF32, {3, 5}, t.a.size(), CopyOf(t.a, &calls));
  deferred.AddTensor("b", DType::kF32, {7}, t.b.size(), CopyOf(t.b, &calls));
  const std::string p = TempPath("whole.gguf"), q = TempPath("deferred.gguf");
  ASSERT_TRUE(whole.Write(p).ok());
  const absl::Status wrote = deferred.Write(q);
  ASSERT_TRUE(wrote.ok()) << wrote;
  EXPECT_EQ(calls, 2);
  const std::string bytes = testing::ReadFileBytes(p);
  EXPECT_FALSE(bytes.empty());
  EXPECT_EQ(bytes, testing::ReadFileBytes(q));
  fs::remove(p);
  fs::remove(q);
}

TEST(GgufWriterTest, AProducersFailureLeavesNoFile) {
  const Tensors t;
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  int calls = 0;
  w.AddTensor("a", DType::kF32, {3, 5}, t.a.size(), CopyOf(t.a, &calls));
  w.AddTensor("blk.0.bad", DType::kF32, {7}, t.b.size(),
              [](absl::Span<uint8_t>) { return absl::DataLossError("disk read error"); });
  const std::string p = TempPath("failed.gguf");
  const absl::Status s = w.Write(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("blk.0.bad"), std::string::npos) << s;
  EXPECT_NE(s.message().find("disk read error"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST(GgufWriterTest, ProgressIsToldAndCanCancel) {
  const Tensors t;
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.AddTensor("a", DType::kF32, {3, 5}, t.a);
  w.AddTensor("b", DType::kF32, {7}, t.b);
  const std::string p = TempPath("progress.gguf");
  std::vector<uint64_t> seen;
  ASSERT_TRUE(w.Write(p, [&](uint64_t written, uint64_t total) {
                 EXPECT_EQ(total, t.a.size() + t.b.size());
                 seen.push_back(written);
                 return true;
               }).ok());
  EXPECT_EQ(seen, (std::vector<uint64_t>{t.a.size(), t.a.size() + t.b.size()}));
  fs::remove(p);
  const absl::Status s = w.Write(p, [](uint64_t, uint64_t) { return false; });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

}  // namespace
}  // namespace moe
