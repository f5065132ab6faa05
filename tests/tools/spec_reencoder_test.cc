// ReencodeSpec defers its re-encodings to the write: the result holds no re-encoded bytes until
// then, writes the file a re-encoding held in memory would, and takes a source whose own
// conversions are deferred (a Hugging Face import on its way to moe-quantize's .moe).
#include "tools/moe-quantize/spec_reencoder.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "lib/format/moe_writer.h"
#include "lib/import/hf_import.h"
#include "tests/hf/checkpoint_builder.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// Every tensor of `spec` made now, into memory it keeps: re-encoding held whole, as it was.
ModelSpec Made(ModelSpec spec) {
  EXPECT_TRUE(MaterializeTensors(spec).ok());
  return spec;
}

// A fresh directory `name` holding a tiny checkpoint of the Hugging Face class `arch`.
fs::path TinyCheckpoint(const std::string& name, const std::string& arch) {
  const fs::path dir = testing::TempFilePath(name);
  fs::remove_all(dir);
  const nlohmann::json config = testing::TinyConfig(arch);
  testing::WriteCheckpoint(dir, config, testing::TinyTensors(config, 5));
  return dir;
}

// Matrices to F16, the rest as they are (norms and the router are F32 after the import).
DType MatricesToF16(const TensorSpec& t) {
  return t.shape.size() == 2 && t.dtype == DType::kBF16 ? DType::kF16 : t.dtype;
}

TEST(ReencodeSpecTest, DefersEachTensorToTheWriteAndWritesTheSameFile) {
  const fs::path dir = TinyCheckpoint("spec_reencoder", "Qwen3MoeForCausalLM");
  auto now = ImportHfCheckpoint(dir.string(), DType::kBF16, ConvertAt::kImport);
  auto later = ImportHfCheckpoint(dir.string(), DType::kBF16, ConvertAt::kWrite);
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_TRUE(later.ok()) << later.status();
  auto from_now = ReencodeSpec(*now, MatricesToF16);
  auto from_later = ReencodeSpec(*later, MatricesToF16);
  ASSERT_TRUE(from_now.ok()) << from_now.status();
  ASSERT_TRUE(from_later.ok()) << from_later.status();
  int reencoded = 0;
  for (const TensorSpec& t : from_now->tensors) {
    if (t.dtype != DType::kF16) continue;
    ++reencoded;
    EXPECT_TRUE(t.deferred() && t.data.empty()) << t.name << " was re-encoded before the write";
  }
  EXPECT_GT(reencoded, 8);
  const fs::path a = dir / "held.moe", b = dir / "deferred.moe", c = dir / "both.moe";
  ASSERT_TRUE(WriteMoeFile(Made(*from_now), a.string()).ok());
  ASSERT_TRUE(WriteMoeFile(*from_now, b.string()).ok());
  ASSERT_TRUE(WriteMoeFile(*from_later, c.string()).ok());
  const std::string held = testing::ReadFileBytes(a);
  EXPECT_FALSE(held.empty());
  EXPECT_EQ(held, testing::ReadFileBytes(b));
  EXPECT_EQ(held, testing::ReadFileBytes(c));
  fs::remove_all(dir);
}

TEST(ReencodeSpecTest, ATypeWhoseBlocksDoNotFitIsRefusedBeforeTheWrite) {
  // Mixtral's tiny shapes: rows of 32 and 16 values.
  const fs::path dir = TinyCheckpoint("spec_reencoder_fit", "MixtralForCausalLM");
  auto spec = ImportHfCheckpoint(dir.string(), std::nullopt, ConvertAt::kWrite);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto q4_k = ReencodeSpec(*spec, [](const TensorSpec& t) {
    return t.shape.size() == 2 ? DType::kQ4_K : t.dtype;  // 256-value super-blocks
  });
  ASSERT_FALSE(q4_k.ok());
  EXPECT_EQ(q4_k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(q4_k.status().message().find("Q4_K"), std::string::npos) << q4_k.status();
  fs::remove_all(dir);
}

// A deferred source that fails inside a re-encoded tensor: the write ends naming the tensor once.
TEST(ReencodeSpecTest, ASourceThatFailsIsNamedOnceByTheWrite) {
  const fs::path dir = TinyCheckpoint("spec_reencoder_fail", "Qwen3MoeForCausalLM");
  auto spec = ImportHfCheckpoint(dir.string(), DType::kBF16, ConvertAt::kWrite);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string failing;
  for (TensorSpec& t : spec->tensors) {
    if (t.shape.size() != 2 || t.dtype != DType::kBF16) continue;
    t.data = {};
    t.produce = [](absl::Span<uint8_t>) { return absl::DataLossError("shard unreadable"); };
    failing = t.name;
    break;
  }
  ASSERT_FALSE(failing.empty());
  auto f16 = ReencodeSpec(*spec, MatricesToF16);
  ASSERT_TRUE(f16.ok()) << f16.status();
  const absl::Status wrote = WriteMoeFile(*f16, (dir / "out.moe").string());
  ASSERT_FALSE(wrote.ok());
  const std::string message(wrote.message());
  const std::string named = "'" + failing + "'";
  EXPECT_NE(message.find("shard unreadable"), std::string::npos) << message;
  const size_t first = message.find(named);
  ASSERT_NE(first, std::string::npos) << message;
  EXPECT_EQ(message.find(named, first + 1), std::string::npos) << "named twice: " << message;
  EXPECT_FALSE(fs::exists(dir / "out.moe"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe
