// Model::Create: every tensor a file carries is one the model runs.
#include "lib/model/model.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lib/import/gguf_import.h"

namespace moe {
namespace {

ModelSpec FixtureSpec(const std::string& name) {
  auto spec =
      ImportGguf(std::string(MOE_TESTDATA_DIR) + "/fixtures-v2/" + name + "/" + name + ".gguf");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : ModelSpec{};
}

TEST(ModelTest, EveryFixtureTensorIsUsed) {
  for (const std::string name : {"tiny-qwen3moe-f32", "tiny-deepseek3-q8_0", "tiny-gptoss-f32",
                                 "tiny-glm4moe-f32", "tiny-deepseek2lite-f32"}) {
    auto model = Model::Create(FixtureSpec(name));
    EXPECT_TRUE(model.ok()) << name << ": " << model.status();
  }
}

// A 1-D F32 tensor of `values` (static storage: the spec does not own it).
TensorSpec VectorTensor(const std::string& name, const std::vector<float>& values) {
  TensorSpec t;
  t.name = name;
  t.shape = {static_cast<int64_t>(values.size())};
  t.data = {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)};
  return t;
}

// llama.cpp refuses a file with a tensor it does not read; libmoe refuses one with a tensor it
// does not run (an NVFP4 file's scales, a fused QKV) rather than run the file as if the tensor
// were not there.
TEST(ModelTest, ATensorTheModelDoesNotRunIsRefused) {
  static const std::vector<float> kValues(16, 1.f);
  for (const char* extra :
       {"blk.0.attn_q.scale", "blk.1.ffn_up_exps.scale", "blk.0.attn_qkv.weight"}) {
    ModelSpec spec = FixtureSpec("tiny-qwen3moe-f32");
    spec.tensors.push_back(VectorTensor(extra, kValues));
    auto model = Model::Create(std::move(spec));
    ASSERT_FALSE(model.ok()) << extra;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
    EXPECT_TRUE(absl::StrContains(model.status().message(), extra)) << model.status();
  }
}

// rope_freqs (Llama 3's per-pair RoPE divisors) runs when it has one positive value a pair.
TEST(ModelTest, RopeFrequencyFactorsAreOnePositiveDivisorAPair) {
  ModelSpec spec = FixtureSpec("tiny-qwen3moe-f32");
  const size_t pairs = spec.hp.rope_dim / 2;
  static const std::vector<float> kGood(pairs, 2.f), kShort(pairs - 1, 2.f);
  static std::vector<float> kZero(pairs, 2.f);
  kZero[1] = 0.f;
  ModelSpec good = spec;
  good.tensors.push_back(VectorTensor(std::string(kRopeFreqsTensor), kGood));
  auto model = Model::Create(std::move(good));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NE((*model)->rope_freq_factors(), nullptr);
  EXPECT_EQ((*model)->rope_freq_factors()[pairs - 1], 2.f);
  for (const std::vector<float>* bad : {&kShort, static_cast<const std::vector<float>*>(&kZero)}) {
    ModelSpec s = spec;
    s.tensors.push_back(VectorTensor(std::string(kRopeFreqsTensor), *bad));
    auto refused = Model::Create(std::move(s));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "rope_freqs")) << refused.status();
  }
}

}  // namespace
}  // namespace moe
