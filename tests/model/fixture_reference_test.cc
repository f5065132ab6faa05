// Reproduces llama.cpp's logits and greedy tokens for every model in testdata/fixtures.
// F32 models are compared with their own references; quantized models with the `deq.*`
// references (llama.cpp on the exact dequantized weights), since libmoe keeps activations in F32.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
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
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

template <typename T>
std::vector<T> ReadBinary(const fs::path& p) {
  return testing::ReadArray<T>(p);
}

std::vector<int64_t> ReadInts(const fs::path& p) { return testing::ReadIntegers<int64_t>(p); }

// Margins (max - second logit) per greedy step, from gen_info.tsv.
std::vector<double> ReadMargins(const fs::path& p) {
  std::ifstream f(p);
  std::vector<double> margins;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    std::string step, pos, tok, maxl, second;
    if (!(s >> step >> pos >> tok >> maxl >> second)) continue;
    if (step == "step") continue;  // header
    margins.push_back(std::stod(maxl) - std::stod(second));
  }
  return margins;
}

// Every folder of both sets: fixtures/ (llama.cpp c392e50) and fixtures-v2/ (mainline 3f545be,
// the newer families).
std::vector<fs::path> FixtureDirs() {
  std::vector<fs::path> dirs;
  for (const char* set : {"fixtures", "fixtures-v2"}) {
    fs::path root = fs::path(MOE_TESTDATA_DIR) / set;
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.is_directory() && fs::exists(e.path() / (e.path().filename().string() + ".gguf"))) {
        dirs.push_back(e.path());
      }
    }
  }
  std::sort(dirs.begin(), dirs.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return dirs;
}

class FixtureTest : public ::testing::TestWithParam<fs::path> {};

// Per-prompt tolerance for llama.cpp's quantized run, from quant_vs_deq.tsv.
double QuantTolerance(const fs::path& dir, const std::string& prompt) {
  std::ifstream f(dir / "quant_vs_deq.tsv");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    std::string p, rows, top, max_abs, tol;
    if (s >> p >> rows >> top >> max_abs >> tol && p == prompt) return std::stod(tol);
  }
  return -1;
}

struct Reference {
  std::string suffix;  // "" or ".deq"
  bool quantize_activations;
  bool relative_tolerance;  // 1e-3 x max|logit|, else the folder's quant_vs_deq tolerance
};

void CheckAgainst(const fs::path& dir, const Model& model_ref,
                  const std::shared_ptr<const Model>& model, const Reference& ref, int threads) {
  const std::string name = dir.filename().string();
  const HParams& h = model_ref.hp();
  auto backend = CreateCpuBackend({threads, ref.quantize_activations});
  Transformer tf(model, backend.get());
  for (std::string p : {"p1", "p2"}) {
    SCOPED_TRACE(name + " " + p + ref.suffix + " threads=" + std::to_string(threads) +
                 (ref.quantize_activations ? " q8-activations" : " f32-activations"));
    std::vector<int64_t> prompt64 = ReadInts(dir / (p + ".tokens.txt"));
    std::vector<int32_t> prompt(prompt64.begin(), prompt64.end());
    const int64_t n = prompt.size();
    auto rows = ReadBinary<float>(dir / (p + ref.suffix + ".logits_rows.f32"));
    auto row_pos = ReadInts(dir / (p + ".logits_rows_pos.txt"));
    ASSERT_EQ(rows.size(), row_pos.size() * h.n_vocab);
    float max_abs = 0;
    for (float v : rows) max_abs = std::max(max_abs, std::fabs(v));
    const double tol = ref.relative_tolerance ? 1e-3 * max_abs : QuantTolerance(dir, p);
    ASSERT_GT(tol, 0);

    auto cache =
        KvCache::Create(h.n_layer, 256, h.n_head_kv, h.head_dim, DType::kF32, h.values_in_keys());
    ASSERT_TRUE(cache.ok());
    std::vector<float> logits;
    ASSERT_TRUE(tf.Forward(prompt, *cache, LogitsFor::kAll, &logits).ok());
    ASSERT_EQ(logits.size(), static_cast<size_t>(n * h.n_vocab));

    double max_err = 0;
    for (size_t r = 0; r < row_pos.size(); ++r) {
      for (int64_t v = 0; v < h.n_vocab; ++v) {
        double err = std::fabs(logits[row_pos[r] * h.n_vocab + v] - rows[r * h.n_vocab + v]);
        max_err = std::max(max_err, err);
      }
    }
    auto top_ids = ReadBinary<int32_t>(dir / (p + ref.suffix + ".top16_ids.i32"));
    auto top_logits = ReadBinary<float>(dir / (p + ref.suffix + ".top16_logits.f32"));
    ASSERT_EQ(top_ids.size(), static_cast<size_t>(n * 16));
    double max_top_err = 0;
    for (int64_t t = 0; t < n; ++t) {
      for (int j = 0; j < 16; ++j) {
        double err =
            std::fabs(logits[t * h.n_vocab + top_ids[t * 16 + j]] - top_logits[t * 16 + j]);
        max_top_err = std::max(max_top_err, err);
      }
    }
    std::printf(
        "[fixture] %s %s%s %s threads=%d: max |logit err| %.3g (rows), %.3g (top16), tol %.3g\n",
        name.c_str(), p.c_str(), ref.suffix.c_str(),
        ref.quantize_activations ? "q8-act" : "f32-act", threads, max_err, max_top_err, tol);
    EXPECT_LE(max_err, tol);
    EXPECT_LE(max_top_err, tol);

    // Greedy: argmax of the last prompt row, then one token per decode step.
    auto want = ReadInts(dir / (p + ref.suffix + ".gen_tokens.txt"));
    auto margins = ReadMargins(dir / (p + ref.suffix + ".gen_info.tsv"));
    ASSERT_EQ(want.size(), margins.size());
    std::vector<float> last(logits.end() - h.n_vocab, logits.end());
    for (size_t step = 0; step < want.size(); ++step) {
      int32_t tok = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      if (margins[step] < tol) break;  // the reference itself was undecided here
      ASSERT_EQ(tok, want[step]) << "greedy step " << step;
      ASSERT_TRUE(tf.Forward({&tok, 1}, *cache, LogitsFor::kLast, &last).ok());
    }
  }
}

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
        CheckAgainst(dir, **model, *model, {"", true, true}, threads);
        continue;
      }
      // F32 activations reproduce llama.cpp on the dequantized weights to 1e-3 x max|logit|;
      // 8-bit activations reproduce its quantized run within the folder's stated tolerance.
      CheckAgainst(dir, **model, *model, {".deq", false, true}, threads);
      CheckAgainst(dir, **model, *model, {"", true, false}, threads);
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
    CheckAgainst(dir, **model, *model, {".deq", false, true}, 2);
    CheckAgainst(dir, **model, *model, {"", true, false}, 2);
  } else {
    CheckAgainst(dir, **model, *model, {"", true, true}, 2);
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
    for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
      SetSimdLevelForTesting(level);
      SCOPED_TRACE(std::string("re-laid for ") + std::string(CpuSimdLevelName(load_level)) +
                   ", simd " + std::string(CpuSimdLevelName(level)));
      for (int threads : {1, 2}) {
        CheckAgainst(dir, *model, model, {".deq", false, true}, threads);
        CheckAgainst(dir, *model, model, {"", true, false}, threads);
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

INSTANTIATE_TEST_SUITE_P(AllFixtures, FixtureTest, ::testing::ValuesIn(FixtureDirs()),
                         [](const auto& info) {
                           std::string s = info.param.filename().string();
                           std::replace_if(
                               s.begin(), s.end(), [](char c) { return !isalnum(c); }, '_');
                           return s;
                         });

}  // namespace
}  // namespace moe
