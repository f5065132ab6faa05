// Hugging Face import of glm4moe, deepseek2 (V2 and V3) and gpt-oss against mainline llama.cpp's
// references: each GGUF fixture of tests/data/fixtures-v2 is written back out as the transformers
// checkpoint it would have been converted from (gguf_as_hf.h), imported, and must give
// llama.cpp's logits and greedy tokens, with the hyper-parameters of the GGUF itself. Variants the
// runtime would compute differently from transformers are refused with the key named.
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/format/moe_reader.h"
#include "lib/format/moe_writer.h"
#include "lib/import/gguf_import.h"
#include "lib/import/hf_import.h"
#include "lib/import/safetensors_file.h"
#include "lib/model/model.h"
#include "tests/hf/checkpoint_builder.h"
#include "tests/hf/deferred_conversion_check.h"
#include "tests/hf/gguf_as_hf.h"
#include "tests/hf/import_equals_gguf.h"
#include "tests/support/fixture_reference.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using ::moe::testing::CheckAgainstFixture;
using ::moe::testing::DescribeHParams;
using ::moe::testing::ExpectDeferredConversionWritesTheSameFile;
using ::moe::testing::ExpectImportStatesTheGguf;
using ::moe::testing::WriteGgufAsHfCheckpoint;
using ::testing::HasSubstr;

fs::path FixtureDir(const std::string& name) {
  return fs::path(MOE_TESTDATA_DIR) / "fixtures-v2" / name;
}

fs::path GgufPath(const std::string& name) { return FixtureDir(name) / (name + ".gguf"); }

fs::path ScratchDir() {
  return fs::temp_directory_path() / ("moe_hf_fixture_test_" + std::to_string(getpid()));
}

// The checkpoints are written once per run of the test binary and removed at its end.
class RemoveScratch : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(ScratchDir()); }
};
::testing::Environment* const kRemoveScratch =
    ::testing::AddGlobalTestEnvironment(new RemoveScratch);

// The fixture as a checkpoint.
fs::path Checkpoint(const std::string& name) {
  const fs::path dir = ScratchDir() / name;
  if (!fs::exists(dir / "config.json")) WriteGgufAsHfCheckpoint(GgufPath(name).string(), dir);
  return dir;
}

class HfImportFixtureTest : public ::testing::TestWithParam<std::string> {};

// The checkpoint states the model the GGUF states (import_equals_gguf.h).
TEST_P(HfImportFixtureTest, ImportStatesTheGguf) {
  auto gguf = ImportGguf(GgufPath(GetParam()).string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto hf = ImportHfCheckpoint(Checkpoint(GetParam()).string());
  ASSERT_TRUE(hf.ok()) << hf.status();
  ExpectImportStatesTheGguf(*hf, *gguf);
}

TEST_P(HfImportFixtureTest, LogitsAndGreedyTokensMatchLlamaCpp) {
  const fs::path dir = FixtureDir(GetParam());
  auto spec = ImportHfCheckpoint(Checkpoint(GetParam()).string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto model = Model::Create(*std::move(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  const bool quantized = fs::exists(dir / "p1.deq.gen_tokens.txt");
  // F32 activations: llama.cpp's F32 run, or for a quantized GGUF its run on the dequantized
  // weights (the checkpoint holds the quantized non-expert weights as their F32 values).
  const double err = CheckAgainstFixture(dir, *model, {quantized ? ".deq" : "", false, true}, 2);
  std::printf("[hf-fixture] %s: max |logit err| %.3g\n", GetParam().c_str(), err);
}

// The .moe container keeps what the import made (moe-convert writes it from the same import).
TEST_P(HfImportFixtureTest, ViaMoeFileToo) {
  auto spec = ImportHfCheckpoint(Checkpoint(GetParam()).string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const fs::path path = Checkpoint(GetParam()).parent_path() / (GetParam() + ".moe");
  ASSERT_TRUE(WriteMoeFile(*spec, path.string()).ok());
  auto reread = ReadMoeFile(path.string());
  fs::remove(path);
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_TRUE(reread->hp == spec->hp);
  auto model = Model::Create(*std::move(reread));
  ASSERT_TRUE(model.ok()) << model.status();
  const fs::path dir = FixtureDir(GetParam());
  const bool quantized = fs::exists(dir / "p1.deq.gen_tokens.txt");
  CheckAgainstFixture(dir, *model, {quantized ? ".deq" : "", false, true}, 1);
}

// Converting each tensor only as the file is written (moe-convert's way, so that a large model
// is never held converted in memory) writes the same file, and such a spec also runs as the
// fixture says.
TEST_P(HfImportFixtureTest, ConversionsDeferredToTheWriteGiveTheSameFile) {
  const fs::path dir = Checkpoint(GetParam());
  ExpectDeferredConversionWritesTheSameFile(dir, std::nullopt);
  EXPECT_GT(ExpectDeferredConversionWritesTheSameFile(dir, DType::kF16), 0);
  auto spec = ImportHfCheckpoint(dir.string(), std::nullopt, ConvertAt::kWrite);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto model = Model::Create(*std::move(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  const bool quantized = fs::exists(FixtureDir(GetParam()) / "p1.deq.gen_tokens.txt");
  CheckAgainstFixture(FixtureDir(GetParam()), *model, {quantized ? ".deq" : "", false, true}, 1);
}

INSTANTIATE_TEST_SUITE_P(FixturesV2, HfImportFixtureTest,
                         ::testing::Values("tiny-glm4moe-f32", "tiny-deepseek2lite-f32",
                                           "tiny-deepseek3-f32", "tiny-gptoss-f32",
                                           "tiny-gptoss-mxfp4"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = isalnum(c) ? c : '_';
                           return s;
                         });

// Imported with Q8_0 asked for, the MXFP4 checkpoint is the MXFP4_MOE GGUF again: the same bytes
// for every tensor (Q8_0 requantizes its dequantized values exactly), and with 8-bit activations
// llama.cpp's quantized run.
TEST(HfImportMxfp4Test, QuantizedImportIsTheQuantizedGguf) {
  const std::string name = "tiny-gptoss-mxfp4";
  auto gguf = ImportGguf(GgufPath(name).string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto hf = ImportHfCheckpoint(Checkpoint(name).string(), DType::kQ8_0);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_GT(ExpectDeferredConversionWritesTheSameFile(Checkpoint(name), DType::kQ8_0), 0);
  for (const TensorSpec& want : gguf->tensors) {
    SCOPED_TRACE(want.name);
    const TensorSpec* got = hf->Find(want.name);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->dtype, want.dtype);
    ASSERT_EQ(got->data.size(), want.byte_size());
    EXPECT_EQ(0, std::memcmp(got->data.data(), want.data.data(), want.byte_size()));
  }
  auto model = Model::Create(*std::move(hf));
  ASSERT_TRUE(model.ok()) << model.status();
  CheckAgainstFixture(FixtureDir(name), *model, {"", true, false}, 2);
}

// The checkpoint's MXFP4 bytes read as transformers reads them (convert_moe_packed_tensors:
// value 2b from the low nibble of byte b, 2b + 1 from the high one, times 2^(scale - 127); the
// gate is row 2f of gate_up) give the imported expert's values: the repacking is checked against
// transformers' layout, not only against its own inverse.
TEST(HfImportMxfp4Test, BlocksReadAsTransformersReadsThem) {
  const fs::path dir = Checkpoint("tiny-gptoss-mxfp4");
  auto file = SafetensorsFile::Open((dir / "model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsTensor* blocks = (*file)->Find("model.layers.1.mlp.experts.gate_up_proj_blocks");
  const SafetensorsTensor* scales = (*file)->Find("model.layers.1.mlp.experts.gate_up_proj_scales");
  ASSERT_NE(blocks, nullptr);
  ASSERT_NE(scales, nullptr);
  auto spec = ImportHfCheckpoint(dir.string(), DType::kF32);  // MXFP4 dequantized on import
  ASSERT_TRUE(spec.ok()) << spec.status();
  static const float kE2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6};
  const int64_t rows2 = blocks->shape[1], groups = blocks->shape[2], cols = groups * 32;
  for (int e : {0, 5, 15}) {
    for (const char* part : {"ffn_gate", "ffn_up"}) {
      const TensorSpec* t = spec->Find(ExpertTensorName(1, e, part));
      ASSERT_NE(t, nullptr);
      ASSERT_EQ(t->dtype, DType::kF32);
      const float* got = reinterpret_cast<const float*>(t->data.data());
      const int half = std::string(part) == "ffn_up";
      for (int64_t f = 0; f < t->shape[0]; ++f) {
        const int64_t row = e * rows2 + 2 * f + half;
        for (int64_t k = 0; k < cols; ++k) {
          const uint8_t byte = blocks->data[(row * groups + k / 32) * 16 + k % 32 / 2];
          const int code = k % 2 == 0 ? byte & 0x0f : byte >> 4;
          const float want = std::ldexp(kE2m1[code], scales->data[row * groups + k / 32] - 127);
          ASSERT_EQ(got[f * cols + k], want) << part << " expert " << e << " row " << f;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Refusals: config.json variants transformers would run differently, each naming its key.

absl::Status ImportWithConfig(const std::string& fixture, const std::string& as,
                              const std::function<void(nlohmann::json&)>& edit) {
  const fs::path src = Checkpoint(fixture);
  const fs::path dir = src.parent_path() / ("edited_" + as);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink(src / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(src / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  edit(config);
  std::ofstream(dir / "config.json") << config.dump(2);
  return ImportHfCheckpoint(dir.string()).status();
}

struct Refusal {
  const char* fixture;
  const char* what;
  std::function<void(nlohmann::json&)> edit;
  const char* says;
};

TEST(HfImportRefusalTest, UnsupportedVariantsNameTheirKey) {
  const Refusal cases[] = {
      {"tiny-deepseek3-f32", "topk_method", [](auto& c) { c["topk_method"] = "greedy"; },
       "topk_method 'greedy' is not supported for DeepSeek-V3"},
      {"tiny-deepseek3-f32", "scoring_func", [](auto& c) { c["scoring_func"] = "softmax"; },
       "scoring_func 'softmax'"},
      {"tiny-deepseek2lite-f32", "v2_topk", [](auto& c) { c["topk_method"] = "top_p"; },
       "topk_method 'top_p' is not supported for DeepSeek-V2"},
      {"tiny-deepseek2lite-f32", "group_limited",
       [](auto& c) {
         c["topk_method"] = "group_limited_greedy";
         c["n_group"] = 2;
       },
       "'group_limited_greedy' with n_group 2"},
      {"tiny-deepseek2lite-f32", "v2_norm", [](auto& c) { c["norm_topk_prob"] = true; },
       "norm_topk_prob true"},
      {"tiny-deepseek3-f32", "linear", [](auto& c) { c["rope_scaling"]["type"] = "linear"; },
       "rope_scaling of type 'linear' is not supported"},
      {"tiny-deepseek3-f32", "dynamic",
       [](auto& c) {
         c["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
       },
       "of type 'dynamic'"},
      {"tiny-deepseek3-f32", "mscale", [](auto& c) { c["rope_scaling"]["mscale"] = 0.5; },
       "mscale 0.5"},
      {"tiny-deepseek3-f32", "no_mscale",
       [](auto& c) { c["rope_scaling"].erase("mscale_all_dim"); }, "mscale_all_dim 0"},
      {"tiny-deepseek3-f32", "interleave", [](auto& c) { c["rope_interleave"] = false; },
       "rope_interleave false"},
      {"tiny-deepseek3-f32", "factor", [](auto& c) { c["rope_scaling"]["factor"] = 20.0; },
       "rope_scaling.factor 20 differs"},
      {"tiny-glm4moe-f32", "llama3",
       [](auto& c) {
         c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
       },
       "of type 'llama3'"},
      {"tiny-glm4moe-f32", "glm_bias", [](auto& c) { c["attention_bias"] = false; },
       "attention_bias false"},
      {"tiny-gptoss-f32", "swiglu", [](auto& c) { c["swiglu_limit"] = 8.0; }, "swiglu_limit 8"},
      {"tiny-gptoss-f32", "layer_types",
       [](auto& c) {
         c["layer_types"] = {"full_attention", "sliding_attention"};
       },
       "layer_types does not repeat one pattern"},
      {"tiny-gptoss-f32", "longrope", [](auto& c) { c["rope_scaling"]["rope_type"] = "longrope"; },
       "of type 'longrope'"},
  };
  for (const Refusal& r : cases) {
    SCOPED_TRACE(r.what);
    absl::Status s = ImportWithConfig(r.fixture, r.what, r.edit);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr(r.says)) << s;
  }
}

// An MXFP4 expert tensor without its scales is named.
TEST(HfImportRefusalTest, Mxfp4BlocksWithoutScales) {
  const fs::path src = Checkpoint("tiny-gptoss-mxfp4");
  const fs::path dir = src.parent_path() / "no_scales";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json");
  auto file = SafetensorsFile::Open((src / "model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, testing::RawTensor> tensors;
  for (const SafetensorsTensor& t : (*file)->tensors()) {
    if (t.name == "model.layers.0.mlp.experts.down_proj_scales") continue;
    tensors[t.name] = {t.dtype_name, t.shape, std::vector<uint8_t>(t.data.begin(), t.data.end())};
  }
  testing::WriteSafetensors(dir / "model.safetensors", tensors);
  absl::Status s = ImportHfCheckpoint(dir.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("missing tensor 'model.layers.0.mlp.experts.down_proj_scales'"));
}

// gpt-oss without rope_scaling or layer_types is GptOssConfig's default: YaRN 32 over 4096 and
// alternating sliding layers, the fixture's own.
TEST(HfImportDefaultsTest, GptOssClassDefaults) {
  auto full = ImportHfCheckpoint(Checkpoint("tiny-gptoss-f32").string());
  ASSERT_TRUE(full.ok()) << full.status();
  absl::Status s = ImportWithConfig("tiny-gptoss-f32", "defaults", [](auto& c) {
    c.erase("rope_scaling");
    c.erase("layer_types");
  });
  EXPECT_TRUE(s.ok()) << s;
  const fs::path dir = Checkpoint("tiny-gptoss-f32").parent_path() / "edited_defaults";
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->hp == full->hp) << DescribeHParams(spec->hp) << "\n"
                                    << DescribeHParams(full->hp);
}

}  // namespace
}  // namespace moe
