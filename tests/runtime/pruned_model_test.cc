// A model with pruned experts (ModelSpec::pruned_experts, written by moe-cli prune): a smaller
// .moe whose router never picks them, computing exactly what the full model does with the same
// experts switched off, from resident weights or the expert cache.
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/format/moe_reader.h"
#include "lib/format/moe_writer.h"
#include "lib/import/model_loader.h"
#include "lib/runtime/session.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

const std::string kGguf =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-f32/tiny-qwen2moe-f32.gguf";

// The newer families too: group-limited sigmoid routing behind a leading dense layer
// (deepseek2), a router bias (gpt-oss).
const std::vector<std::string> kPrunable = {
    kGguf,
    std::string(MOE_TESTDATA_DIR) + "/fixtures-v2/tiny-deepseek3-f32/tiny-deepseek3-f32.gguf",
    std::string(MOE_TESTDATA_DIR) + "/fixtures-v2/tiny-gptoss-f32/tiny-gptoss-f32.gguf"};

// The first layer with routed experts (after any leading dense layers).
int32_t FirstMixtureLayer(const HParams& h) { return static_cast<int32_t>(h.n_layer_dense); }

std::string TempPath(const std::string& name) {
  return (fs::path(::testing::TempDir()) / (name + std::to_string(::getpid()) + ".moe")).string();
}

// The first mixture layer loses its first and last experts, the last layer its second.
std::vector<ExpertId> SomeExperts(const HParams& h) {
  const int32_t first = FirstMixtureLayer(h);
  return {{first, 0},
          {first, static_cast<int32_t>(h.n_expert - 1)},
          {static_cast<int32_t>(h.n_layer - 1), 1}};
}

std::vector<float> PromptLogits(std::shared_ptr<const Engine> e, const std::vector<ExpertId>& off) {
  SessionOptions so;
  so.threads = 2;
  so.n_ctx = 64;
  auto s = Session::Create(std::move(e), so);
  EXPECT_TRUE(s.ok()) << s.status();
  for (int l = 0; l < (*s)->engine().model()->hp().n_layer; ++l) {
    std::vector<int32_t> experts;
    for (const ExpertId& id : off) {
      if (id.layer == l) experts.push_back(id.expert);
    }
    if (!experts.empty()) {
      EXPECT_TRUE((*s)->SetDisabledExperts(l, experts).ok());
    }
  }
  std::vector<float> logits;
  const std::vector<int32_t> prompt = {1, 17, 99, 4, 250, 31, 8, 77, 12, 5};
  EXPECT_TRUE((*s)->Decode(prompt, &logits).ok());
  // The pruned experts never ran.
  const auto& counts = (*s)->stats().forward.expert_counts;
  for (const ExpertId& id : off) EXPECT_EQ(counts[id.layer][id.expert], 0);
  return logits;
}

TEST(PrunedModelTest, ASmallerFileComputingTheFullModelWithThoseExpertsOff) {
  for (const std::string& gguf : kPrunable) {
    SCOPED_TRACE(gguf);
    auto spec = LoadModelSpec(gguf);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const std::vector<ExpertId> pruned = SomeExperts(spec->hp);
    const std::string full_path = TempPath("pruned_full"), pruned_path = TempPath("pruned");
    ASSERT_TRUE(WriteMoeFile(*spec, full_path).ok());
    spec->pruned_experts = pruned;
    ASSERT_TRUE(WriteMoeFile(*spec, pruned_path).ok());
    const int32_t first = FirstMixtureLayer(spec->hp);
    const auto expert_bytes = spec->Find(ExpertTensorName(first, 0, "ffn_gate"))->byte_size() * 3;
    EXPECT_LE(fs::file_size(pruned_path) + 3 * expert_bytes, fs::file_size(full_path));

    auto back = ReadMoeFile(pruned_path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->pruned_experts, pruned);
    EXPECT_EQ(back->Find(ExpertTensorName(first, 0, "ffn_gate")), nullptr);
    auto full_counts = CountParams(*spec);
    spec->pruned_experts.clear();
    EXPECT_LT(CountParams(*back).total, CountParams(*spec).total);
    EXPECT_EQ(full_counts.total, CountParams(*back).total);

    auto full = Engine::Load(full_path, {});
    auto small = Engine::Load(pruned_path, {});
    ASSERT_TRUE(full.ok() && small.ok());
    const std::vector<float> want = PromptLogits(*full, pruned);
    EXPECT_EQ(PromptLogits(*small, {}), want) << "bit for bit";
    EXPECT_EQ(PromptLogits(*small, pruned), want) << "switching pruned experts off changes nothing";
    // From the expert cache too.
    LoadOptions cached;
    cached.expert_cache_fraction = 0.5;
    auto from_disk = Engine::Load(pruned_path, cached);
    ASSERT_TRUE(from_disk.ok()) << from_disk.status();
    ASSERT_NE((*from_disk)->expert_store(), nullptr);
    EXPECT_EQ(PromptLogits(*from_disk, {}), want);

    // Switching off the rest of a layer is refused, naming the pruned ones.
    SessionOptions so;
    so.threads = 1;
    auto s = Session::Create(*small, so);
    ASSERT_TRUE(s.ok());
    std::vector<int32_t> rest;
    for (int e = 1; e + 1 < (*small)->model()->hp().n_expert; ++e) rest.push_back(e);
    const absl::Status none = (*s)->SetDisabledExperts(FirstMixtureLayer(spec->hp), rest);
    EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(none.message().find("pruned"), std::string::npos) << none;
    fs::remove(full_path);
    fs::remove(pruned_path);
  }
}

TEST(PrunedModelTest, BadPruningListsAreRefusedNamingTheExpert) {
  auto spec = LoadModelSpec(kGguf);
  ASSERT_TRUE(spec.ok());
  const HParams h = spec->hp;
  const std::string path = TempPath("pruned_bad");
  std::vector<ExpertId> too_many;
  for (int e = 0; e <= h.n_expert - h.n_expert_used; ++e) too_many.push_back({0, e});
  for (auto [list, words] :
       {std::pair{std::vector<ExpertId>{{0, 1}, {0, 1}}, "pruned twice"},
        std::pair{std::vector<ExpertId>{{0, static_cast<int32_t>(h.n_expert)}}, "outside"},
        std::pair{std::vector<ExpertId>{{static_cast<int32_t>(h.n_layer), 0}}, "layer"},
        std::pair{too_many, "fewer than the"}}) {
    spec->pruned_experts = list;
    const absl::Status s = WriteMoeFile(*spec, path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s;
  }
  fs::remove(path);
}

}  // namespace
}  // namespace moe
