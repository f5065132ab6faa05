#include "lib/model/model_spec.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_import.h"
#include "lib/model/arch/architecture.h"

namespace moe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The DeepSeek-V3 fixture: latent attention, leading dense layers, shared experts, so that every
// size the checks multiply is set.
ModelSpec DeepseekSpec() {
  auto spec = ImportGguf(std::string(MOE_TESTDATA_DIR) +
                         "/fixtures-v2/tiny-deepseek3-f32/tiny-deepseek3-f32.gguf");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : ModelSpec{};
}

TEST(ModelSpecTest, TheFixtureIsValid) { EXPECT_TRUE(ValidateModelSpec(DeepseekSpec()).ok()); }

// Find answers from an index of names; edits to the tensors between lookups (renames, removals,
// insertions, copies of the spec) never make it answer wrong.
TEST(ModelSpecTest, FindFollowsEditsToTheTensors) {
  ModelSpec spec;
  for (int i = 0; i < 5; ++i) spec.tensors.push_back({.name = "t" + std::to_string(i)});
  ASSERT_NE(spec.Find("t3"), nullptr);
  EXPECT_EQ(spec.Find("t3")->name, "t3");
  EXPECT_EQ(spec.Find("t9"), nullptr);

  spec.tensors[3].name = "renamed";
  EXPECT_EQ(spec.Find("t3"), nullptr);
  ASSERT_NE(spec.Find("renamed"), nullptr);
  EXPECT_EQ(spec.Find("renamed"), &spec.tensors[3]);

  spec.tensors.erase(spec.tensors.begin());  // every position moves
  for (const std::string name : {"t1", "t2", "renamed", "t4"}) {
    ASSERT_NE(spec.Find(name), nullptr) << name;
    EXPECT_EQ(spec.Find(name)->name, name);
  }
  EXPECT_EQ(spec.Find("t0"), nullptr);

  spec.tensors.insert(spec.tensors.begin(), {.name = "first"});
  EXPECT_EQ(spec.Find("t4"), &spec.tensors[4]);
  EXPECT_EQ(spec.Find("first"), &spec.tensors[0]);

  const ModelSpec copy = spec;  // answers from its own tensors, not the original's
  EXPECT_EQ(copy.Find("t4"), &copy.tensors[4]);
  spec.tensors.clear();
  EXPECT_EQ(spec.Find("t4"), nullptr);
  EXPECT_EQ(copy.Find("first"), &copy.tensors[0]);
}

// Found by moe_file_fuzz: a .moe file whose qk_nope_dim was 8026645363650080321 overflowed
// n_head x (qk_nope + rope) while its expected shapes were worked out (undefined behaviour).
// Every size is bounded before anything multiplies it.
// Granite's multipliers: positive and finite, and a residual multiplier only where the routed
// experts' weights can carry it (no shared expert); the interleaved expert layers' step within
// the layers.
TEST(ModelSpecTest, MultipliersAndLayerStepOutOfRangeAreErrors) {
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (float HParams::*field :
         {&HParams::embedding_scale, &HParams::residual_scale, &HParams::logit_scale}) {
      ModelSpec spec = DeepseekSpec();
      spec.hp.*field = bad;
      const absl::Status status = ValidateModelSpec(spec);
      EXPECT_TRUE(absl::IsInvalidArgument(status)) << bad << ": " << status;
      EXPECT_THAT(status.message(), HasSubstr("must be a positive number")) << status;
    }
  }
  // With shared experts the multiplier scales their output too (Granite-4.0-H): allowed.
  ModelSpec shared = DeepseekSpec();
  ASSERT_GT(shared.hp.n_ff_shared, 0);
  shared.hp.residual_scale = 0.5f;
  EXPECT_TRUE(ValidateModelSpec(shared).ok()) << ValidateModelSpec(shared);
  for (int64_t step : {int64_t{0}, int64_t{-2}, int64_t{1} << 40}) {
    ModelSpec spec = DeepseekSpec();
    spec.hp.moe_layer_step = step;
    EXPECT_THAT(ValidateModelSpec(spec).message(), HasSubstr("experts every")) << step;
  }
}

// Llama 4's chunks need a size, its query temperature a floor; periods and offsets are not
// negative.
TEST(ModelSpecTest, ChunksAndTemperatureOutOfRangeAreErrors) {
  ModelSpec chunked = DeepseekSpec();
  chunked.hp.window_chunked = true;
  EXPECT_THAT(ValidateModelSpec(chunked).message(), HasSubstr("without a chunk size"));
  ModelSpec no_floor = DeepseekSpec();
  no_floor.hp.nope_period = 4, no_floor.hp.attn_temp_scale = 0.1f;
  EXPECT_THAT(ValidateModelSpec(no_floor).message(), HasSubstr("temperature"));
  ModelSpec period = DeepseekSpec();
  period.hp.nope_period = -1;
  EXPECT_THAT(ValidateModelSpec(period).message(), HasSubstr("NoPE layers every -1"));
  ModelSpec nan = DeepseekSpec();
  nan.hp.attn_temp_scale = std::numeric_limits<float>::quiet_NaN(), nan.hp.attn_temp_floor = 8;
  EXPECT_FALSE(ValidateModelSpec(nan).ok());
  ModelSpec latent = DeepseekSpec();
  latent.hp.qk_norm = QkNorm::kPerHeadUnweighted;
  EXPECT_THAT(ValidateModelSpec(latent).message(), HasSubstr("latent"));
}

TEST(ModelSpecTest, SizesPastTheBoundAreErrorsBeforeAnyProduct) {
  const int64_t huge = 8026645363650080321, size = int64_t{1} << 24;
  struct Case {
    const char* name;
    int64_t HParams::*field;
    int64_t max;
  };
  for (const Case& c :
       {Case{"qk_nope_dim", &HParams::qk_nope_dim, size},
        Case{"v_head_dim", &HParams::v_head_dim, size},
        Case{"kv_lora_rank", &HParams::kv_lora_rank, size},
        Case{"q_lora_rank", &HParams::q_lora_rank, size},
        Case{"rope_dim", &HParams::rope_dim, size}, Case{"head_dim", &HParams::head_dim, size},
        Case{"n_embd", &HParams::n_embd, size}, Case{"n_vocab", &HParams::n_vocab, size},
        Case{"n_ff_expert", &HParams::n_ff_expert, size},
        Case{"n_ff_dense", &HParams::n_ff_dense, size},
        Case{"n_ff_shared", &HParams::n_ff_shared, size}, Case{"n_head", &HParams::n_head, 4096},
        Case{"n_layer", &HParams::n_layer, 4096}, Case{"n_expert", &HParams::n_expert, 65536}}) {
    for (int64_t value : {huge, c.max + 1}) {
      ModelSpec spec = DeepseekSpec();
      spec.hp.*c.field = value;
      const absl::Status status = ValidateModelSpec(spec);
      EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.name << " " << value << ": " << status;
      EXPECT_THAT(status.message(),
                  HasSubstr(std::string(c.name) + " " + std::to_string(value) + " is out of range"))
          << status;
    }
    // The bound itself is allowed (the file then fails on something else, its shapes).
    ModelSpec spec = DeepseekSpec();
    spec.hp.*c.field = c.max;
    EXPECT_THAT(ValidateModelSpec(spec).message(), Not(HasSubstr("out of range"))) << c.name;
  }
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// A qwen35moe file's keys: the sizes a gated-delta-net hybrid needs, and optionally its list of
// recurrent layers (or a list that cannot be read as one).
class Qwen35Keys final : public MetadataKeys {
 public:
  std::map<std::string, int64_t> ints = {{"ssm.conv_kernel", 4}, {"ssm.inner_size", 64},
                                         {"ssm.state_size", 16}, {"ssm.time_step_rank", 4},
                                         {"ssm.group_count", 2}, {"nextn_predict_layers", 1}};
  std::optional<absl::StatusOr<std::vector<int64_t>>> recurrent;

  absl::StatusOr<int64_t> Int(absl::string_view key, std::optional<int64_t> def) const override {
    if (auto it = ints.find(std::string(key)); it != ints.end()) return it->second;
    if (def) return *def;
    return absl::NotFoundError(key);
  }
  absl::StatusOr<float> Float(absl::string_view, float def) const override { return def; }
  absl::StatusOr<bool> Bool(absl::string_view, bool def) const override { return def; }
  bool Has(absl::string_view key) const override { return ints.contains(std::string(key)); }
  absl::StatusOr<std::vector<int64_t>> IntArray(absl::string_view key) const override {
    if (key == "rope.dimension_sections") return std::vector<int64_t>{11, 11, 10, 0};
    if (key == "attention.recurrent_layers" && recurrent) return *recurrent;
    return absl::NotFoundError(key);
  }
};

absl::StatusOr<HParams> ReadQwen35(const Qwen35Keys& keys) {
  HParams h;
  h.n_layer = 6;  // block_count: five layers that run and the MTP block
  MOE_RETURN_IF_ERROR(ArchitectureOf(Arch::kQwen35Moe).ReadMetadata(keys, &h));
  return h;
}

// Qwen3.5-MoE's layer kinds: attention.recurrent_layers when the file has it (with or without
// the MTP block's entry), else every full_attention_interval-th layer attends, as llama.cpp; a
// list there but unreadable is an error, never the interval's guess; delta nets whose inner size
// is not their value heads' are refused.
TEST(ModelSpecTest, Qwen35LayerKindsComeFromTheFileOrTheInterval) {
  Qwen35Keys keys;
  auto h = ReadQwen35(keys);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->n_layer, 5);
  EXPECT_EQ(h->ssm_layers, (std::vector<int64_t>{0, 1, 2, 4}));
  EXPECT_TRUE(h->attention_output_gate);
  keys.ints["full_attention_interval"] = 2;
  h = ReadQwen35(keys);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->ssm_layers, (std::vector<int64_t>{0, 2, 4}));
  keys.recurrent = std::vector<int64_t>{1, 0, 0, 1, 1, 0};
  h = ReadQwen35(keys);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->ssm_layers, (std::vector<int64_t>{0, 3, 4}));
  keys.recurrent = absl::InvalidArgumentError(
      "GGUF key 'qwen35moe.attention.recurrent_layers' "
      "is not an integer array");
  EXPECT_THAT(ReadQwen35(keys).status().message(), HasSubstr("recurrent_layers"));
  keys.recurrent = std::vector<int64_t>{1, 0};
  EXPECT_THAT(ReadQwen35(keys).status().message(), HasSubstr("2 entries"));
  keys.recurrent.reset();
  keys.ints["ssm.inner_size"] = 96;
  EXPECT_THAT(ReadQwen35(keys).status().message(), HasSubstr("ssm.inner_size (96)"));
}

}  // namespace
}  // namespace moe
