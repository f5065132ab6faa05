#include "tests/hf/deferred_conversion_check.h"

#include <string>

#include "gtest/gtest.h"
#include "lib/format/moe_writer.h"
#include "lib/import/hf_import.h"
#include "tests/support/test_files.h"

namespace moe::testing {
namespace {

namespace fs = std::filesystem;

// Whether the tensor's bytes lie in one of the checkpoint's mapped shards (carried over as they
// are) rather than in a converted copy.
bool InShard(const ModelSpec& spec, const TensorSpec& t) {
  for (const ModelSpec::SourceFile& f : spec.source_files) {
    if (t.data.data() >= f.base && t.data.data() + t.data.size() <= f.base + f.size) return true;
  }
  return false;
}

}  // namespace

int ExpectDeferredConversionWritesTheSameFile(const fs::path& dir, std::optional<DType> out) {
  auto now = ImportHfCheckpoint(dir.string(), out, ConvertAt::kImport);
  auto later = ImportHfCheckpoint(dir.string(), out, ConvertAt::kWrite);
  EXPECT_TRUE(now.ok()) << now.status();
  EXPECT_TRUE(later.ok()) << later.status();
  if (!now.ok() || !later.ok()) return 0;
  EXPECT_EQ(now->tensors.size(), later->tensors.size());
  int deferred = 0;
  for (const TensorSpec& t : now->tensors) {
    if (t.deferred()) ADD_FAILURE() << t.name << ": deferred by an import that converts at once";
    const TensorSpec* d = later->Find(t.name);
    if (d == nullptr) {
      ADD_FAILURE() << t.name << " missing from the deferred import";
      continue;
    }
    EXPECT_EQ(d->dtype, t.dtype) << t.name;
    // Converted copies are what would fill memory; carried-over spans cost nothing.
    EXPECT_EQ(d->deferred(), !InShard(*now, t)) << t.name;
    if (d->deferred()) {
      EXPECT_TRUE(d->data.empty()) << t.name << ": made before it was needed";
      ++deferred;
    }
  }
  const fs::path a = dir / "converted_at_import.moe", b = dir / "converted_at_write.moe";
  const absl::Status wrote_a = WriteMoeFile(*now, a.string());
  const absl::Status wrote_b = WriteMoeFile(*later, b.string());
  EXPECT_TRUE(wrote_a.ok()) << wrote_a;
  EXPECT_TRUE(wrote_b.ok()) << wrote_b;
  const std::string bytes_a = ReadFileBytes(a), bytes_b = ReadFileBytes(b);
  EXPECT_FALSE(bytes_a.empty());
  EXPECT_TRUE(bytes_a == bytes_b) << "the two files differ (" << bytes_a.size() << " and "
                                  << bytes_b.size() << " bytes)";
  fs::remove(a);
  fs::remove(b);
  return deferred;
}

}  // namespace moe::testing
