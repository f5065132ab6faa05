// The disk tier's reads: exact bytes at any offset in either mode, errors for reads past the end,
// a file that shrank, an injected I/O error, and a file changed on disk.
#include "lib/moe/expert_file_reader.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

class ExpertFileReaderTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    path_ = fs::path(::testing::TempDir()) /
            ("moe_expert_reader_" + std::to_string(::getpid()) + (GetParam() ? "_d" : "_b"));
    bytes_.resize(3 * 4096 + 1234);
    for (size_t i = 0; i < bytes_.size(); ++i) bytes_[i] = static_cast<uint8_t>(i * 7 + i / 251);
    Write(bytes_);
    auto reader = ExpertFileReader::Open(path_.string(), /*prefer_direct=*/GetParam());
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_ = *std::move(reader);
  }
  void TearDown() override { fs::remove(path_); }
  void Write(const std::vector<uint8_t>& b) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(b.data()), b.size());
  }

  fs::path path_;
  std::vector<uint8_t> bytes_;
  std::unique_ptr<ExpertFileReader> reader_;
};

TEST_P(ExpertFileReaderTest, ReadsExactBytesAtAnyOffset) {
  if (!GetParam()) EXPECT_EQ(reader_->mode(), ExpertFileReader::Mode::kBuffered);
  std::printf("[ reader   ] %s reads in %s\n", GetParam() ? "direct preferred:" : "buffered:",
              ExpertFileReader::ModeName(reader_->mode()));
  for (uint64_t offset : {0ul, 1ul, 4095ul, 4096ul, 5000ul, 12000ul}) {
    for (size_t size : {1ul, 100ul, 4096ul, 8193ul}) {
      if (offset + size > bytes_.size()) continue;
      std::vector<uint8_t> out(size, 0xAA);
      ASSERT_TRUE(reader_->Read(offset, absl::MakeSpan(out)).ok()) << offset << "+" << size;
      EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes_.begin() + offset))
          << offset << "+" << size;
    }
  }
  // The last byte of the file, whose block is short.
  uint8_t last = 0;
  ASSERT_TRUE(reader_->Read(bytes_.size() - 1, {&last, 1}).ok());
  EXPECT_EQ(last, bytes_.back());
}

TEST_P(ExpertFileReaderTest, ReadsPastTheEndOrOfAShrunkFileAreErrors) {
  std::vector<uint8_t> out(100);
  absl::Status past = reader_->Read(bytes_.size() - 50, absl::MakeSpan(out));
  EXPECT_EQ(past.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(past.message().find("past its end"), std::string::npos) << past;
  fs::resize_file(path_, 4096);  // shrinks under the open reader
  absl::Status shrunk = reader_->Read(8000, absl::MakeSpan(out));
  EXPECT_EQ(shrunk.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(shrunk.message().find("short read"), std::string::npos) << shrunk;
  EXPECT_FALSE(reader_->CheckUnchanged().ok());
}

TEST_P(ExpertFileReaderTest, AnInjectedReadErrorIsTheReadsStatus) {
  reader_->set_fault_for_testing([](uint64_t offset, size_t) {
    return offset >= 4096 ? absl::DataLossError("injected EIO") : absl::OkStatus();
  });
  std::vector<uint8_t> out(64);
  EXPECT_TRUE(reader_->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_EQ(reader_->Read(4096, absl::MakeSpan(out)).message(), "injected EIO");
}

TEST_P(ExpertFileReaderTest, AFileChangedOnDiskIsDetected) {
  EXPECT_TRUE(reader_->CheckUnchanged().ok());
  std::vector<uint8_t> longer = bytes_;
  longer.push_back(1);
  Write(longer);
  absl::Status changed = reader_->CheckUnchanged();
  EXPECT_EQ(changed.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(changed.message().find("changed on disk"), std::string::npos) << changed;
  fs::remove(path_);
  EXPECT_NE(reader_->CheckUnchanged().message().find("gone"), std::string::npos);
}

TEST(ExpertFileReaderOpenTest, AMissingFileIsNotFound) {
  auto r = ExpertFileReader::Open("/no/such/model.gguf");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Modes, ExpertFileReaderTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "direct" : "buffered"; });

}  // namespace
}  // namespace moe
