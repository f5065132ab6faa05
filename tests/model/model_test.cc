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

// llama.cpp refuses a file with a tensor it does not read; libmoe refuses one with a tensor it
// does not run (a Llama-3 MoE merge's rope_freqs, an NVFP4 file's scales) rather than run the
// file as if the tensor were not there.
TEST(ModelTest, ATensorTheModelDoesNotRunIsRefused) {
  for (const char* extra : {"rope_freqs.weight", "blk.0.attn_q.scale", "blk.1.ffn_up_exps.scale"}) {
    ModelSpec spec = FixtureSpec("tiny-qwen3moe-f32");
    static const std::vector<float> kValues(16, 1.f);
    TensorSpec t;
    t.name = extra;
    t.shape = {16};
    t.data = {reinterpret_cast<const uint8_t*>(kValues.data()), kValues.size() * sizeof(float)};
    spec.tensors.push_back(t);
    auto model = Model::Create(std::move(spec));
    ASSERT_FALSE(model.ok()) << extra;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
    EXPECT_TRUE(absl::StrContains(model.status().message(), extra)) << model.status();
  }
}

}  // namespace
}  // namespace moe
