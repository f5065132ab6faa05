#include "tests/support/fixture_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/base/status_macros.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "tests/support/test_files.h"

namespace moe::testing {
namespace {

namespace fs = std::filesystem;

template <typename T>
std::vector<T> ReadBinary(const fs::path& p) {
  return ReadArray<T>(p);
}

std::vector<int64_t> ReadInts(const fs::path& p) { return ReadIntegers<int64_t>(p); }

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

// One prompt; `worst` takes the largest logit error.
void CheckPrompt(const fs::path& dir, const std::string& p, Transformer& tf, const HParams& h,
                 const FixtureReference& ref, int threads, double* worst) {
  const std::string name = dir.filename().string();
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
      double err = std::fabs(logits[t * h.n_vocab + top_ids[t * 16 + j]] - top_logits[t * 16 + j]);
      max_top_err = std::max(max_top_err, err);
    }
  }
  std::printf(
      "[fixture] %s %s%s %s threads=%d: max |logit err| %.3g (rows), %.3g (top16), tol %.3g\n",
      name.c_str(), p.c_str(), ref.suffix.c_str(), ref.quantize_activations ? "q8-act" : "f32-act",
      threads, max_err, max_top_err, tol);
  EXPECT_LE(max_err, tol);
  EXPECT_LE(max_top_err, tol);
  *worst = std::max({*worst, max_err, max_top_err});

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

}  // namespace

double CheckAgainstFixture(const fs::path& dir, const std::shared_ptr<const Model>& model,
                           const FixtureReference& ref, int threads) {
  auto backend = CreateCpuBackend({threads, ref.quantize_activations});
  Transformer tf(model, backend.get());
  double worst = 0;
  for (const std::string p : {"p1", "p2"}) {
    CheckPrompt(dir, p, tf, model->hp(), ref, threads, &worst);
  }
  return worst;
}

absl::StatusOr<KvTypeDeviation> MeasureKvType(const fs::path& dir,
                                              const std::shared_ptr<const Model>& model,
                                              DType kv_type, int threads) {
  const HParams& h = model->hp();
  auto backend = CreateCpuBackend({threads, false});
  Transformer tf(model, backend.get());
  KvTypeDeviation d;
  std::vector<int32_t> chosen[2];  // every token's experts in every layer, in order, per run
  int run = 0;
  tf.set_routing_observer(
      [&](int, int64_t rows, int k, const int32_t* experts, const float*, const float*) {
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<int32_t> set(experts + r * k, experts + (r + 1) * k);
          std::sort(set.begin(), set.end());
          chosen[run].insert(chosen[run].end(), set.begin(), set.end());
        }
      });
  for (const std::string p : {"p1", "p2"}) {
    std::vector<int64_t> prompt64 = ReadInts(dir / (p + ".tokens.txt"));
    const std::vector<int32_t> prompt(prompt64.begin(), prompt64.end());
    const size_t steps = ReadInts(dir / (p + ".gen_tokens.txt")).size();
    std::vector<float> rows[2];  // every computed row: the F32 cache's, then kv_type's
    std::vector<int32_t> fed;    // the F32 run's greedy tokens, fed to both
    for (run = 0; run < 2; ++run) {
      MOE_ASSIGN_OR_RETURN(auto cache,
                           KvCache::Create(h.n_layer, 256, h.n_head_kv, h.head_dim,
                                           run == 0 ? DType::kF32 : kv_type, h.values_in_keys()));
      std::vector<float> logits;
      MOE_RETURN_IF_ERROR(tf.Forward(prompt, cache, LogitsFor::kAll, &logits));
      rows[run] = logits;
      std::vector<float> last(logits.end() - h.n_vocab, logits.end());
      for (size_t step = 0; step < steps; ++step) {
        if (run == 0) {
          fed.push_back(
              static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
        }
        MOE_RETURN_IF_ERROR(tf.Forward({&fed[step], 1}, cache, LogitsFor::kLast, &last));
        rows[run].insert(rows[run].end(), last.begin(), last.end());
      }
    }
    float max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < rows[0].size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(rows[0][i]));
      max_diff = std::max(max_diff, std::fabs(rows[0][i] - rows[1][i]));
    }
    d.max_relative_diff = std::max(d.max_relative_diff, double{max_diff} / max_abs);
    // The greedy rows: the prompt's last and each step's.
    const size_t n_rows = rows[0].size() / h.n_vocab;
    for (size_t r = prompt.size() - 1; r < n_rows; ++r) {
      const float* a = rows[0].data() + r * h.n_vocab;
      const float* b = rows[1].data() + r * h.n_vocab;
      std::vector<float> sorted(a, a + h.n_vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] <= 2 * max_diff) continue;
      ++d.decided_steps;
      d.agreeing_steps +=
          std::max_element(a, a + h.n_vocab) - a == std::max_element(b, b + h.n_vocab) - b;
    }
  }
  d.expert_choices = std::ssize(chosen[0]);
  if (chosen[1].size() != chosen[0].size()) return absl::InternalError("routing runs differ");
  for (size_t i = 0; i < chosen[0].size(); ++i) d.changed_choices += chosen[0][i] != chosen[1][i];
  return d;
}

}  // namespace moe::testing
