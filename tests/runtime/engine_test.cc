// Loading: mapped or copied weights, re-laid rows or not, give the same model.
#include "lib/runtime/engine.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/format/moe_writer.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"

namespace moe {
namespace {

const std::string kFixtures = std::string(MOE_TESTDATA_DIR) + "/fixtures/";

// Prompt logits of every position, then eight greedy decode steps' logits.
std::vector<float> PromptAndDecodeLogits(const Engine& e) {
  const HParams& h = e.model()->hp();
  auto backend = CreateCpuBackend(2);
  Transformer tf(e.model(), backend.get());
  auto cache = KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim, DType::kF32);
  std::vector<int32_t> prompt = {1, 415, 2936, 9060, 285, 10575, 754, 272};
  std::vector<float> all, logits;
  EXPECT_TRUE(tf.Forward(prompt, *cache, LogitsFor::kAll, &logits).ok());
  all = logits;
  for (int i = 0; i < 8; ++i) {
    int32_t t = static_cast<int32_t>(std::max_element(logits.end() - h.n_vocab, logits.end()) -
                                     (logits.end() - h.n_vocab));
    EXPECT_TRUE(tf.Forward({&t, 1}, *cache, LogitsFor::kLast, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// Both load modes run the same kernels on the same bytes. (Re-laid rows run other kernels,
// which quantize prompt activations as llama.cpp does: fixture_reference_test checks those
// against llama.cpp's own logits.)
TEST(EngineTest, LoadModesGiveTheSameLogits) {
  for (const char* name : {"tiny-llama-moe-q8_0", "tiny-qwen2moe-q4_0"}) {
    const std::string path = kFixtures + name + "/" + name + ".gguf";
    std::vector<float> reference;
    for (auto [mmap, repack] : {std::pair{true, false}, std::pair{false, false}}) {
      LoadOptions o;
      o.use_mmap = mmap;
      o.repack = repack;
      auto e = Engine::Load(path, o);
      ASSERT_TRUE(e.ok()) << e.status();
      std::vector<float> got = PromptAndDecodeLogits(**e);
      if (reference.empty()) {
        reference = got;
        continue;
      }
      ASSERT_EQ(got.size(), reference.size());
      float max_err = 0, max_abs = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        max_err = std::max(max_err, std::fabs(got[i] - reference[i]));
        max_abs = std::max(max_abs, std::fabs(reference[i]));
      }
      EXPECT_LE(max_err, 1e-5f * max_abs) << name << " mmap=" << mmap << " repack=" << repack;
    }
  }
}

TEST(EngineTest, ReLaidModelsAreNeverWrittenToFiles) {
  if (ActiveSimdLevel() < SimdLevel::kAvx512Vnni)
    GTEST_SKIP() << "rows are re-laid only for AVX-512 VNNI";
  LoadOptions o;
  auto e = Engine::Load(kFixtures + "tiny-llama-moe-q8_0/tiny-llama-moe-q8_0.gguf", o);
  ASSERT_TRUE(e.ok());
  bool relaid = false;
  for (const auto& t : (*e)->model()->spec().tensors) relaid |= IsRuntimeLayout(t.dtype);
  ASSERT_TRUE(relaid);
  ModelSpec copy = (*e)->model()->spec();
  auto s = WriteMoeFile(copy, "/tmp/moe_engine_test_relaid.moe");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("run-time layout"), std::string::npos) << s;
}

}  // namespace
}  // namespace moe
