// CopyWeights: deferred tensors (a converter's) are made in place in the copy, re-laid like the
// others, and a producer's failure is returned naming the tensor.
#include "lib/runtime/weight_copy.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "lib/import/model_loader.h"

namespace moe {
namespace {

const std::string kFixture =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf";

// The spec with every tensor made by a producer that copies its bytes, counting the calls.
ModelSpec Deferred(const ModelSpec& spec, int* calls) {
  ModelSpec d = spec;
  for (TensorSpec& t : d.tensors) {
    t.produce = [calls, from = t.data](absl::Span<uint8_t> out) {
      ++*calls;
      if (out.size() != from.size()) return absl::InternalError("wrong size asked for");
      std::memcpy(out.data(), from.data(), out.size());
      return absl::OkStatus();
    };
    t.data = {};
  }
  return d;
}

TEST(WeightCopyTest, DeferredTensorsAreMadeInPlaceAndRelaid) {
  auto spec = LoadModelSpec(kFixture);
  ASSERT_TRUE(spec.ok()) << spec.status();
  int calls = 0;
  ModelSpec deferred = Deferred(*spec, &calls);
  ModelSpec carried = *spec;
  ASSERT_TRUE(CopyWeights(carried, /*repack=*/true, SimdLevel::kAvx2, nullptr).ok());
  const absl::Status copied = CopyWeights(deferred, /*repack=*/true, SimdLevel::kAvx2, nullptr);
  ASSERT_TRUE(copied.ok()) << copied;
  EXPECT_EQ(calls, static_cast<int>(spec->tensors.size()));
  int relaid = 0;
  for (size_t i = 0; i < carried.tensors.size(); ++i) {
    const TensorSpec &want = carried.tensors[i], &got = deferred.tensors[i];
    SCOPED_TRACE(want.name);
    EXPECT_FALSE(got.deferred());
    EXPECT_EQ(got.dtype, want.dtype);
    relaid += got.dtype != spec->tensors[i].dtype;
    ASSERT_EQ(got.data.size(), want.data.size());
    EXPECT_EQ(0, std::memcmp(got.data.data(), want.data.data(), want.data.size()));
  }
  EXPECT_GT(relaid, 0);
}

TEST(WeightCopyTest, AProducersFailureNamesTheTensor) {
  auto spec = LoadModelSpec(kFixture);
  ASSERT_TRUE(spec.ok()) << spec.status();
  int calls = 0;
  ModelSpec deferred = Deferred(*spec, &calls);
  TensorSpec& bad = deferred.tensors.back();
  bad.produce = [](absl::Span<uint8_t>) { return absl::DataLossError("disk read error"); };
  const absl::Status s = CopyWeights(deferred, /*repack=*/false, SimdLevel::kAvx2, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(bad.name), std::string::npos) << s;
}

}  // namespace
}  // namespace moe
