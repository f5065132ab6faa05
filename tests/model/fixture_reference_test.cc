// Reproduces llama.cpp's logits and greedy tokens for every model in testdata/fixtures.
// F32 models are compared with their own references; quantized models with the `deq.*`
// references (llama.cpp on the exact dequantized weights), since libmoe keeps activations in F32.
#include "tests/support/fixture_reference.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/format/moe_reader.h"
#include "lib/format/moe_writer.h"
#include "lib/import/gguf_import.h"
#include "lib/kv/kv_cache.h"
#include "lib/kv/paged_kv_storage.h"
#include "lib/model/forward.h"
#include "lib/model/model.h"
#include "lib/runtime/engine.h"
#include "tests/support/fixture_dirs.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

class FixtureTest : public ::testing::TestWithParam<fs::path> {};

using ::moe::testing::CheckAgainstFixture;

TEST_P(FixtureTest, LogitsAndGreedyTokensMatchLlamaCpp) {
  const fs::path dir = GetParam();
  const std::string name = dir.filename().string();
  auto spec = ImportGguf((dir / (name + ".gguf")).string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto model = Model::Create(*std::move(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  const bool quantized = fs::exists(dir / "p1.deq.gen_tokens.txt");
  const SimdLevel native = ActiveSimdLevel();
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
    if (level > DetectedSimdLevel()) continue;
    SetSimdLevelForTesting(level);
    SCOPED_TRACE(std::string("simd ") + std::string(CpuSimdLevelName(level)));
    for (int threads : {1, 2}) {
      if (!quantized) {
        CheckAgainstFixture(dir, *model, {"", true, true}, threads);
        continue;
      }
      // F32 activations reproduce llama.cpp on the dequantized weights to 1e-3 x max|logit|;
      // 8-bit activations reproduce its quantized run within the folder's stated tolerance.
      CheckAgainstFixture(dir, *model, {".deq", false, true}, threads);
      CheckAgainstFixture(dir, *model, {"", true, false}, threads);
    }
  }
  SetSimdLevelForTesting(native);
}

// The same model written to a .moe container and read back (what moe-convert makes) keeps
// every hyper-parameter and gives the same results.
TEST_P(FixtureTest, ViaMoeFileToo) {
  const fs::path dir = GetParam();
  const std::string name = dir.filename().string();
  auto gguf = ImportGguf((dir / (name + ".gguf")).string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const fs::path path = fs::temp_directory_path() /
                        ("fixture_reference_test_" + std::to_string(::getpid()) + name + ".moe");
  ASSERT_TRUE(WriteMoeFile(*gguf, path.string()).ok());
  auto spec = ReadMoeFile(path.string());
  fs::remove(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->hp == gguf->hp);
  auto model = Model::Create(*std::move(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  if (fs::exists(dir / "p1.deq.gen_tokens.txt")) {
    CheckAgainstFixture(dir, *model, {".deq", false, true}, 2);
    CheckAgainstFixture(dir, *model, {"", true, false}, 2);
  } else {
    CheckAgainstFixture(dir, *model, {"", true, true}, 2);
  }
}

// The default load path re-lays quantized rows for the level's kernels (16-row groups, whose
// kernels quantize the activations of prompt batches too, as llama.cpp does): the same
// references hold for it, for rows re-laid for AVX2 and for AVX-512 VNNI, through every level's
// kernels for those layouts.
TEST_P(FixtureTest, ReLaidRowsMatchLlamaCppToo) {
  const fs::path dir = GetParam();
  const std::string name = dir.filename().string();
  if (!fs::exists(dir / "p1.deq.gen_tokens.txt")) GTEST_SKIP() << "float weights: nothing re-laid";
  if (DetectedSimdLevel() < SimdLevel::kAvx2) GTEST_SKIP() << "rows are re-laid from AVX2 up";
  const SimdLevel native = ActiveSimdLevel();
  for (SimdLevel load_level : {SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
    if (load_level > DetectedSimdLevel()) continue;
    SetSimdLevelForTesting(load_level);
    auto engine = Engine::Load((dir / (name + ".gguf")).string(), LoadOptions{});
    ASSERT_TRUE(engine.ok()) << engine.status();
    const std::shared_ptr<const Model> model = (*engine)->model();
    int grouped = 0;
    for (const auto& t : model->spec().tensors) grouped += RowGroup(t.dtype) > 1;
    ASSERT_GT(grouped, 0);
    for (SimdLevel level :
         {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvxVnni, SimdLevel::kAvx512Vnni}) {
      if (!CpuSupportsLevel(level)) continue;
      SetSimdLevelForTesting(level);
      SCOPED_TRACE(std::string("re-laid for ") + std::string(CpuSimdLevelName(load_level)) +
                   ", simd " + std::string(CpuSimdLevelName(level)));
      for (int threads : {1, 2}) {
        CheckAgainstFixture(dir, model, {".deq", false, true}, threads);
        CheckAgainstFixture(dir, model, {"", true, false}, threads);
      }
    }
  }
  SetSimdLevelForTesting(native);
}

// Latent attention caches per token one row of kv_lora_rank + rope dims per layer (576 values
// for the real DeepSeek models), not K and V per head.
TEST(LatentAttentionTest, CacheHoldsTheLatentAndTheRopeKeyOnly) {
  const fs::path dir = fs::path(MOE_TESTDATA_DIR) / "fixtures-v2" / "tiny-deepseek3-f32";
  auto spec = ImportGguf((dir / "tiny-deepseek3-f32.gguf").string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const HParams& h = spec->hp;
  EXPECT_EQ(h.kv_lora_rank, 64);
  EXPECT_EQ(h.rope_dim, 16);
  const size_t per_token = static_cast<size_t>((h.kv_lora_rank + h.rope_dim) * h.n_layer);
  EXPECT_EQ(KvBytesPerToken(h, DType::kF32), per_token * 4);
  EXPECT_EQ(KvBytesPerToken(h, DType::kF16), per_token * 2);
  auto cache =
      KvCache::Create(h.n_layer, 256, h.n_head_kv, h.head_dim, DType::kF16, h.values_in_keys());
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(cache->byte_size(), 256 * per_token * 2);
  PagedKvShape shape{h.n_layer, h.n_head_kv, h.head_dim, DType::kF16, 5, h.values_in_keys()};
  EXPECT_EQ(PagedKvStorage::BlockBytes(shape), 32 * per_token * 2);
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, FixtureTest, ::testing::ValuesIn(testing::FixtureDirs()),
                         testing::FixtureTestName);

}  // namespace
}  // namespace moe
