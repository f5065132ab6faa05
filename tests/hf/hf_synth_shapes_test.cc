// Hugging Face import of qwen3moe, glm4moe, deepseek2 and gpt-oss on shapes the fixtures do not
// have: each moe-synth GGUF (odd head counts and sizes, few experts, top-1, latent sizes, expert
// groups, windows, QK-norm, MXFP4, K-quants) is written out as the transformers checkpoint
// llama.cpp's converter would have made it from (gguf_as_hf.h), imported, and must state the
// GGUF's model, then load.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "lib/import/gguf_import.h"
#include "lib/import/hf_import.h"
#include "lib/model/model.h"
#include "tests/hf/gguf_as_hf.h"
#include "tests/hf/import_equals_gguf.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

struct SynthShape {
  const char* name;
  const char* flags;  // moe-synth's, besides the output and the vocabulary
};

void PrintTo(const SynthShape& s, std::ostream* os) { *os << s.name << ": " << s.flags; }

class HfSynthShapesTest : public ::testing::TestWithParam<SynthShape> {};

TEST_P(HfSynthShapesTest, ImportStatesTheGguf) {
#ifndef MOE_SYNTH_PATH
  GTEST_SKIP() << "built without the tools (moe-synth writes this test's models)";
#else
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("moe_hf_synth_shapes_" + std::to_string(getpid()) + "_" + GetParam().name);
  fs::create_directories(dir);
  const fs::path gguf_path = dir / "model.gguf";
  const std::string cmd = std::string(MOE_SYNTH_PATH) + " -o " + gguf_path.string() +
                          " --synthetic-vocab 64 --layers 3 " + GetParam().flags + " 2> /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const fs::path checkpoint = dir / "checkpoint";
  ::moe::testing::WriteGgufAsHfCheckpoint(gguf_path.string(), checkpoint);
  auto gguf = ImportGguf(gguf_path.string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto hf = ImportHfCheckpoint(checkpoint.string());
  ASSERT_TRUE(hf.ok()) << hf.status();
  ::moe::testing::ExpectImportStatesTheGguf(*hf, *gguf);
  auto model = Model::Create(*std::move(hf));
  EXPECT_TRUE(model.ok()) << model.status();
  fs::remove_all(dir);
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HfSynthShapesTest,
    ::testing::Values(SynthShape{"gptoss_f32",
                                 "--arch gpt-oss --type f32 --embd 96 --heads 6 --kv-heads 2 "
                                 "--head-dim 32 --experts 5 --top-k 2 --ff 64 --sliding-window 5"},
                      SynthShape{"gptoss_mxfp4",
                                 "--arch gpt-oss --type mxfp4_moe --embd 160 --heads 10 "
                                 "--kv-heads 5 --head-dim 16 --experts 7 --top-k 3 --ff 96 "
                                 "--sliding-window 3"},
                      SynthShape{"deepseek2_lite",
                                 "--arch deepseek2 --type f32 --embd 64 --heads 4 --experts 6 "
                                 "--top-k 2 --ff 32 --kv-lora 24 --qk-nope 16 --qk-rope 8 "
                                 "--v-head 12 --dense-layers 1 --shared-experts 2"},
                      SynthShape{"deepseek3_groups",
                                 "--arch deepseek2 --type f32 --embd 64 --heads 4 "
                                 "--experts 6 --top-k 2 --ff 32 --q-lora 40 --kv-lora 24 "
                                 "--qk-nope 16 --qk-rope 8 --v-head 12 --sigmoid-routing "
                                 "--expert-groups 3 --expert-groups-used 2 "
                                 "--dense-layers 2 --shared-experts 1"},
                      SynthShape{"deepseek3_q8_0",
                                 "--arch deepseek2 --type q8_0 --embd 64 --heads 4 "
                                 "--experts 6 --top-k 2 --ff 32 --q-lora 64 --kv-lora 32 "
                                 "--qk-nope 32 --qk-rope 32 --v-head 32 --sigmoid-routing "
                                 "--expert-groups 2 --expert-groups-used 1"},
                      SynthShape{"glm4moe_qk_norm",
                                 "--arch glm4moe --type f32 --embd 80 --heads 5 --kv-heads 1 "
                                 "--head-dim 16 --experts 5 --top-k 2 --ff 48 "
                                 "--dense-layers 2 --qk-norm"},
                      SynthShape{"qwen3moe_f32",
                                 "--arch qwen3moe --type f32 --embd 96 --heads 6 --kv-heads 2 "
                                 "--head-dim 40 --experts 5 --top-k 3 --ff 48"},
                      SynthShape{"qwen3moe_q4_k_m",
                                 "--arch qwen3moe --type q4_k_m --embd 256 --heads 3 "
                                 "--kv-heads 1 --head-dim 128 --experts 3 --top-k 1 --ff 256"},
                      SynthShape{"glm4moe_q8_0",
                                 "--arch glm4moe --type q8_0 --embd 64 --heads 4 --kv-heads 2 "
                                 "--head-dim 32 --experts 6 --top-k 3 --ff 32 "
                                 "--shared-experts 2"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace moe
