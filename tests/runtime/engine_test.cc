// Loading: mapped or copied weights, re-laid rows or not, give the same model.
#include "lib/runtime/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/repack.h"
#include "lib/format/moe_writer.h"
#include "lib/import/gguf_file.h"
#include "lib/import/model_loader.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/runtime/weight_copy.h"
#include "tests/model/reference_model.h"

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

// Logits of `tokens` fed either as one prompt batch or one token at a time.
std::vector<float> Logits(const Engine& e, const std::vector<int32_t>& tokens, bool one_by_one,
                          bool quantize_activations = true) {
  const HParams& h = e.model()->hp();
  auto backend = CreateCpuBackend({2, quantize_activations});
  Transformer tf(e.model(), backend.get());
  auto cache = KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim, DType::kF32);
  std::vector<float> all, logits;
  if (!one_by_one) {
    EXPECT_TRUE(tf.Forward(tokens, *cache, LogitsFor::kAll, &all).ok());
    return all;
  }
  for (int32_t t : tokens) {
    EXPECT_TRUE(tf.Forward({&t, 1}, *cache, LogitsFor::kLast, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The 16-row group layouts of every re-laid type (K-quants too, which the fixtures lack), end to
// end through the forward pass on two threads:
// - a re-laid prompt batch gives the logits of re-laid one-token steps: the batch tiles, the
//   row splits between threads and the batched attention compute each token exactly as a
//   single-token step does;
// - for Q8_0 and Q4_0, re-laid steps give the row kernels' logits on the rows as stored (the same
//   integer products, float sums in another order). K-quants are left out of this comparison:
//   their min terms cancel, so each kernel's rounding differs by ~1e-5 of a product (all within
//   the bound repack_test checks against the portable kernel), and this random model amplifies
//   that to ~1e-3 of its logits.
TEST(EngineTest, RowGroupLayoutsGiveTheSameLogitsBatchedAndAsStored) {
#ifndef MOE_SYNTH_PATH
  GTEST_SKIP() << "built without the tools (moe-synth writes this test's models)";
#else
  if (DetectedSimdLevel() < SimdLevel::kAvx2) GTEST_SKIP() << "rows are re-laid from AVX2 up";
  const SimdLevel native = ActiveSimdLevel();
  const std::string dir = ::testing::TempDir();
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
    if (level > DetectedSimdLevel()) continue;
    SetSimdLevelForTesting(level);  // loads re-lay for this level; backends run its kernels
    for (const char* type : {"q4_k_m", "q5_k", "q4_0", "q8_0"}) {
      const std::string path = dir + "/moe_engine_test_groups_" + type + ".gguf";
      const std::string cmd =
          std::string(MOE_SYNTH_PATH) + " -o " + path + " --type " + type +
          " --embd 256 --layers 2 --heads 4 --kv-heads 2 --experts 8 --top-k 2" +
          " --ff 256 --shared-ff 512 --seed 7 --vocab " + MOE_TESTDATA_DIR +
          "/tokenizer/ggml-vocab-deepseek-coder.gguf 2> /dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      LoadOptions stored, relaid;
      stored.repack = false;
      auto a = Engine::Load(path, stored);
      auto b = Engine::Load(path, relaid);
      std::remove(path.c_str());  // both copied the weights into memory
      ASSERT_TRUE(a.ok() && b.ok());
      int grouped = 0;
      for (const auto& t : (*b)->model()->spec().tensors) grouped += RowGroup(t.dtype) > 1;
      ASSERT_GT(grouped, 0) << type;
      const std::vector<int32_t> tokens = {1, 415, 2936, 9060, 285, 10575, 754, 272, 13, 99, 7};
      const std::vector<float> steps = Logits(**b, tokens, /*one_by_one=*/true);
      auto max_err = [](const std::vector<float>& x, const std::vector<float>& y) {
        EXPECT_EQ(x.size(), y.size());
        float m = 0;
        for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
          m = std::max(m, std::fabs(x[i] - y[i]));
        return m;
      };
      float max_abs = 0;
      for (float v : steps) max_abs = std::max(max_abs, std::fabs(v));
      EXPECT_LE(max_err(Logits(**b, tokens, /*one_by_one=*/false), steps), 1e-6f * max_abs) << type;
      if (std::string(type) == "q4_0" || std::string(type) == "q8_0") {
        EXPECT_LE(max_err(Logits(**a, tokens, /*one_by_one=*/true), steps), 1e-4f * max_abs)
            << type;
      }
    }
  }
  SetSimdLevelForTesting(native);
#endif
}

// Qwen3-VL-MoE's language model runs text as Qwen3-MoE does where every rotary pair turns with
// the token's position (moe-synth's sections over 16 pairs: [6, 5, 5, 0]); with 32 pairs
// ([12, 10, 10, 0]) pair 31 falls to the extra section, which llama.cpp leaves at angle 0 for
// text: the model's divisor there is infinite and the logits differ. (llama.cpp's own run of
// such a file is checked outside the repository: docs/models.md.)
TEST(EngineTest, Qwen3VlMoeTextIsQwen3MoeWithItsRopeSections) {
#ifndef MOE_SYNTH_PATH
  GTEST_SKIP() << "built without the tools (moe-synth writes this test's models)";
#else
  for (int head_dim : {32, 64}) {
    SCOPED_TRACE(head_dim);
    std::vector<float> logits[2];
    for (int vl = 0; vl < 2; ++vl) {
      const std::string arch = vl ? "qwen3vlmoe" : "qwen3moe";
      const std::string path = ::testing::TempDir() + "/moe_engine_test_" + arch + "_" +
                               std::to_string(getpid()) + ".gguf";
      const std::string cmd =
          std::string(MOE_SYNTH_PATH) + " -o " + path + " --arch " + arch +
          " --type q8_0 --embd 128 --layers 2 --heads 4 --kv-heads 2 --head-dim " +
          std::to_string(head_dim) + " --experts 8 --top-k 2 --ff 64 --rope-base 100" +
          " --seed 5 --vocab " + MOE_TESTDATA_DIR +
          "/tokenizer/ggml-vocab-deepseek-coder.gguf 2> /dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      auto e = Engine::Load(path, {});
      std::remove(path.c_str());
      ASSERT_TRUE(e.ok()) << e.status();
      const Model& m = *(*e)->model();
      if (vl) {
        ASSERT_NE(m.rope_freq_factors(), nullptr);
        for (int64_t i = 0; i < head_dim / 2; ++i) {
          const bool still = head_dim == 64 && i == 31;
          EXPECT_EQ(std::isinf(m.rope_freq_factors()[i]), still) << i;
          if (!still) {
            EXPECT_EQ(m.rope_freq_factors()[i], 1.f) << i;
          }
        }
      }
      std::vector<int32_t> tokens;
      for (int t = 0; t < 40; ++t) tokens.push_back(3 + 97 * t % 30000);
      logits[vl] = Logits(**e, tokens, /*one_by_one=*/false);
    }
    if (head_dim == 32) {
      EXPECT_EQ(logits[1], logits[0]);
    } else {
      EXPECT_NE(logits[1], logits[0]);
    }
  }
#endif
}

// GGUF files in llama.cpp's Q2_K and Q3_K_M mixes, of the other 32-value block types and of
// IQ4_XS: whole files of one type, and the fallbacks llama-quantize writes where rows are not
// whole super-blocks (an expert width of 160: the down projections of a Q4_K_M file take Q5_0
// and Q8_0, of a Q5_K file Q5_1). The tensors carry ggml's type ids (ggml.h); each loads as the
// type its tensors carry and runs, with 8-bit activations and exactly, a prompt batch giving
// the logits of one-token steps. How near the 8-bit runs stay to exact ones is the dot kernels'
// test; "Other block types" in docs/performance.md holds them to llama.cpp's.
TEST(EngineTest, QuantizedFilesLoadAndRun) {
#ifndef MOE_SYNTH_PATH
  GTEST_SKIP() << "built without the tools (moe-synth writes this test's models)";
#else
  struct FileCase {
    const char* scheme;
    int ff;
    uint32_t ggml_type;
    DType dtype;
  };
  for (const FileCase& c :
       {FileCase{"q2_k", 256, 10u, DType::kQ2_K}, FileCase{"q3_k_m", 256, 11u, DType::kQ3_K},
        FileCase{"q4_1", 256, 3u, DType::kQ4_1}, FileCase{"iq4_nl", 256, 20u, DType::kIQ4_NL},
        FileCase{"iq4_xs", 256, 23u, DType::kIQ4_XS}, FileCase{"q4_k_m", 160, 6u, DType::kQ5_0},
        FileCase{"q5_k", 160, 7u, DType::kQ5_1}}) {
    SCOPED_TRACE(c.scheme);
    const std::string path = ::testing::TempDir() + "/moe_engine_test_quantized_" + c.scheme + "_" +
                             std::to_string(getpid()) + ".gguf";
    const std::string ff = std::to_string(c.ff);
    const std::string cmd = std::string(MOE_SYNTH_PATH) + " -o " + path + " --type " + c.scheme +
                            " --embd 256 --layers 2 --heads 4 --kv-heads 2 --experts 8 --top-k 2" +
                            " --ff " + ff + " --shared-ff " + ff + " --seed 9 --vocab " +
                            MOE_TESTDATA_DIR +
                            "/tokenizer/ggml-vocab-deepseek-coder.gguf 2> /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto gguf = GgufFile::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    int in_file = 0;
    for (const GgufTensorInfo& t : (*gguf)->tensors()) in_file += t.ggml_type == c.ggml_type;
    EXPECT_GT(in_file, 0);
    LoadOptions o;
    o.use_mmap = false;
    auto e = Engine::Load(path, o);
    std::remove(path.c_str());
    ASSERT_TRUE(e.ok()) << e.status();
    int loaded = 0;
    // Rows that come in sixteens are re-laid at load as groups (Q2_K, Q3_K from AVX2 up; Q5_0,
    // IQ4_NL and IQ4_XS with AVX-512 VNNI).
    for (const auto& t : (*e)->model()->spec().tensors)
      loaded += GroupSourceType(t.dtype) == c.dtype;
    EXPECT_GT(loaded, 0);
    const std::vector<int32_t> tokens = {1, 415, 2936, 9060, 285, 10575, 754, 272, 13, 99, 7};
    for (const bool exact : {false, true}) {
      const std::vector<float> steps = Logits(**e, tokens, /*one_by_one=*/true, !exact);
      const std::vector<float> batch = Logits(**e, tokens, /*one_by_one=*/false, !exact);
      ASSERT_EQ(steps.size(), batch.size());
      float max_abs = 0, max_err = 0;
      for (size_t i = 0; i < steps.size(); ++i) {
        ASSERT_TRUE(std::isfinite(steps[i])) << "logit " << i;
        max_abs = std::max(max_abs, std::fabs(steps[i]));
        max_err = std::max(max_err, std::fabs(steps[i] - batch[i]));
      }
      EXPECT_GT(max_abs, 0);
      // Exact mode sums the products of a batch in another order: rounding only.
      EXPECT_LE(max_err, (exact ? 1e-4f : 1e-6f) * max_abs) << (exact ? "exact" : "8-bit");
    }
  }
#endif
}

// Llama 4 weighs its experts' inputs by the router: with the dense weights on rank 0 alone, which
// sends the other ranks each layer's inputs and choices but not the weights, the load is refused
// on every rank (none waits for a message that never comes); loaded alike, a rank loads.
TEST(EngineTest, DenseOnRankZeroIsRefusedForInputWeightedExperts) {
  testing::RandomModelOptions o;
  o.arch = Arch::kLlama4;
  o.n_layer = 4, o.n_expert_used = 1, o.n_ff_shared = 40, o.n_expert = 4;
  const std::string path =
      ::testing::TempDir() + "/moe_engine_test_llama4_" + std::to_string(getpid()) + ".moe";
  ASSERT_TRUE(WriteMoeFile(testing::MakeRandomModel(o), path).ok());
  for (int rank : {0, 1}) {
    LoadOptions load;
    load.expert_world = 2;
    load.expert_rank = rank;
    load.dense_on_root_only = true;
    auto refused = Engine::Load(path, load);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
    EXPECT_NE(refused.status().message().find("load every rank alike"), std::string::npos);
    load.dense_on_root_only = false;
    EXPECT_TRUE(Engine::Load(path, load).ok()) << "rank " << rank;
  }
  std::remove(path.c_str());
}

// `moe-convert --layout groups`: a .moe file that stores the 16-row group layouts maps and runs
// them as they are (no copy, no re-laying), computing exactly what the same rows re-laid at load
// compute.
TEST(EngineTest, GroupLayoutFilesMapAndRunLikeRowsReLaidAtLoad) {
  if (DetectedSimdLevel() < SimdLevel::kAvx2) GTEST_SKIP() << "rows are re-laid from AVX2 up";
  const SimdLevel native = ActiveSimdLevel();
  SetSimdLevelForTesting(SimdLevel::kAvx2);  // loads re-lay only the group layouts at AVX2
  for (const char* name : {"tiny-llama-moe-q8_0", "tiny-qwen2moe-q4_0"}) {
    const std::string gguf = kFixtures + name + "/" + name + ".gguf";
    const std::string moe =
        ::testing::TempDir() + "/moe_engine_test_groups_" + std::to_string(getpid()) + ".moe";
    auto spec = LoadModelSpec(gguf);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(CopyWeights(*spec, /*repack=*/true, SimdLevel::kAvx2, nullptr).ok());
    ASSERT_TRUE(WriteMoeFile(*spec, moe).ok());
    LoadOptions mapped;
    mapped.use_mmap = true;
    auto a = Engine::Load(moe, mapped);
    auto b = Engine::Load(gguf, LoadOptions());
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    int grouped = 0;
    for (const auto& t : (*a)->model()->spec().tensors) grouped += RowGroup(t.dtype) > 1;
    EXPECT_GT(grouped, 0) << name;
    EXPECT_EQ(PromptAndDecodeLogits(**a), PromptAndDecodeLogits(**b)) << name;
    {
      // Below AVX2 the same file runs through the portable fallbacks, which unpack each group's
      // rows for the row kernels: the logits of the rows as the GGUF file stores them.
      SetSimdLevelForTesting(SimdLevel::kScalar);
      auto c = Engine::Load(moe, mapped);
      auto d = Engine::Load(gguf, LoadOptions());
      ASSERT_TRUE(c.ok() && d.ok()) << name;
      EXPECT_EQ(PromptAndDecodeLogits(**c), PromptAndDecodeLogits(**d)) << name;
      SetSimdLevelForTesting(SimdLevel::kAvx2);
    }
    std::remove(moe.c_str());

    // A group layout must hold whole groups of 16 rows of a matrix.
    ModelSpec bad = *spec;
    for (auto& t : bad.tensors) {
      if (t.shape.size() == 1) {
        t.dtype = DType::kQ8_0X16;
        break;
      }
    }
    const absl::Status s = WriteMoeFile(bad, moe);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("whole groups"), std::string::npos) << s;
  }
  SetSimdLevelForTesting(native);
}

// The row layouts of one SIMD level (Q8_0R, Q4_0R) stay in memory: a file may be read on
// another CPU.
TEST(EngineTest, RowLayoutsOfOneLevelAreNeverWrittenToFiles) {
  auto spec = LoadModelSpec(kFixtures + "tiny-llama-moe-q8_0/tiny-llama-moe-q8_0.gguf");
  ASSERT_TRUE(spec.ok()) << spec.status();
  bool relabelled = false;
  for (auto& t : spec->tensors) {
    if (t.dtype == DType::kQ8_0 && t.shape.size() == 2) {
      t.dtype = DType::kQ8_0R;  // the same bytes per row, so only the type tells
      relabelled = true;
      break;
    }
  }
  ASSERT_TRUE(relabelled);
  const std::string path =
      ::testing::TempDir() + "/moe_engine_test_rows_" + std::to_string(getpid()) + ".moe";
  auto s = WriteMoeFile(*spec, path);
  std::remove(path.c_str());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("run-time layout"), std::string::npos) << s;
}

}  // namespace
}  // namespace moe
