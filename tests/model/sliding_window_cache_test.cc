// Sliding-window layers keep a ring of their window plus one step instead of the whole context:
// the logits are bit for bit those of a whole cache, the cache is smaller, a step larger than
// the rings were sized for is refused, and a truncation that reaches back past what a ring still
// holds computes the kept tokens again instead of reading rows another position overwrote.
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/model.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/session.h"
#include "tests/model/reference_model.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

const fs::path kGptOss = fs::path(MOE_TESTDATA_DIR) / "fixtures-v2" / "tiny-gptoss-f32";

std::vector<int32_t> PromptTokens(const std::string& p) {
  return testing::ReadIntegers<int32_t>(kGptOss / (p + ".tokens.txt"));
}

std::shared_ptr<const Engine> LoadGptOss() {
  auto engine = Engine::Load((kGptOss / "tiny-gptoss-f32.gguf").string(), LoadOptions{});
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *engine : nullptr;
}

// Every position's logits, the prompt going through in steps of `step` tokens.
std::vector<float> RunInSteps(Transformer& tf, KvCache& cache, const std::vector<int32_t>& ids,
                              int64_t step) {
  std::vector<float> all, logits;
  for (size_t i = 0; i < ids.size(); i += step) {
    const size_t n = std::min<size_t>(step, ids.size() - i);
    absl::Status s =
        tf.Forward(absl::MakeConstSpan(ids).subspan(i, n), cache, LogitsFor::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s;
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The prompt through a whole cache of 256 rows and through rings, in steps of 1, 3 and 9 tokens:
// the same logits bit for bit, each ring layer holding its window + step - 1 rows in blocks of
// 16, the other layers 256.
void ExpectRingsGiveTheWholeCachesLogits(Transformer& tf, const HParams& h,
                                         const std::vector<int64_t>& windows,
                                         const std::vector<int32_t>& ids) {
  for (int64_t step : {1, 3, 9}) {
    SCOPED_TRACE("step " + std::to_string(step));
    auto whole = KvCache::Create(h.n_layer, 256, h.n_head_kv, h.head_dim, DType::kF32);
    auto ringed = KvCache::Create(h.n_layer, 256, h.n_head_kv, h.head_dim, DType::kF32, false,
                                  SlidingWindows{windows, step});
    ASSERT_TRUE(whole.ok() && ringed.ok());
    for (size_t l = 0; l < windows.size(); ++l) {
      EXPECT_EQ(ringed->rows(l), windows[l] > 0 ? (windows[l] + step - 1 + 15) / 16 * 16 : 256)
          << "layer " << l;
    }
    EXPECT_LT(ringed->byte_size(), whole->byte_size());
    EXPECT_EQ(RunInSteps(tf, *ringed, ids, step), RunInSteps(tf, *whole, ids, step));
  }
}

TEST(SlidingWindowCacheTest, RingsGiveTheWholeCachesLogitsBitForBit) {
  auto engine = LoadGptOss();
  ASSERT_NE(engine, nullptr);
  const std::shared_ptr<const Model> model = engine->model();
  const HParams& h = model->hp();
  const std::vector<int64_t>& windows = model->attention_windows();
  ASSERT_EQ(windows.size(), static_cast<size_t>(h.n_layer));
  ASSERT_EQ(windows[0], 8);  // layer 0 slides over 8 positions, layer 1 sees everything
  ASSERT_EQ(windows[1], 0);

  auto backend = CreateCpuBackend({1, false});
  Transformer tf(model, backend.get());
  const std::vector<int32_t> ids = PromptTokens("p2");  // 58 tokens: the ring wraps thrice
  ASSERT_GT(ids.size(), 48u);
  ExpectRingsGiveTheWholeCachesLogits(tf, h, windows, ids);
}

// Llama 4's chunked layers keep a ring of a chunk plus one step too (a query reads back at most
// to its chunk's start, inside the window the ring keeps): bit for bit the whole cache's logits
// over several chunks.
TEST(SlidingWindowCacheTest, ChunkedLayersRingsGiveTheWholeCachesLogitsBitForBit) {
  testing::RandomModelOptions o;
  o.arch = Arch::kLlama4;
  o.n_layer = 4, o.n_expert_used = 1, o.n_ff_shared = 40, o.attention_chunk = 8;
  o.temperature_floor = 16;
  auto model = Model::Create(testing::MakeRandomModel(o));
  ASSERT_TRUE(model.ok()) << model.status();
  const HParams& h = (*model)->hp();
  const std::vector<int64_t>& windows = (*model)->attention_windows();
  ASSERT_EQ(windows, (std::vector<int64_t>{8, 8, 8, 0}));  // the fourth: NoPE, whole context
  auto backend = CreateCpuBackend({1, false});
  Transformer tf(*model, backend.get());
  std::vector<int32_t> ids(58);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % o.n_vocab);
  ExpectRingsGiveTheWholeCachesLogits(tf, h, windows, ids);
}

TEST(SlidingWindowCacheTest, AStepLargerThanTheRingsAreSizedForIsRefused) {
  auto engine = LoadGptOss();
  ASSERT_NE(engine, nullptr);
  const HParams& h = engine->model()->hp();
  auto ringed = KvCache::Create(h.n_layer, 256, h.n_head_kv, h.head_dim, DType::kF32, false,
                                SlidingWindows{engine->model()->attention_windows(), 4});
  ASSERT_TRUE(ringed.ok());
  auto backend = CreateCpuBackend({1, false});
  Transformer tf(engine->model(), backend.get());
  const std::vector<int32_t> ids = PromptTokens("p1");
  std::vector<float> logits;
  absl::Status s =
      tf.Forward(absl::MakeConstSpan(ids).subspan(0, 5), *ringed, LogitsFor::kLast, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(
      tf.Forward(absl::MakeConstSpan(ids).subspan(0, 4), *ringed, LogitsFor::kLast, &logits).ok());
}

TEST(SlidingWindowCacheTest, AContextTooSmallForARingKeepsTheWholeLayer) {
  const std::vector<int64_t> windows = {8, 0};
  auto c = KvCache::Create(2, 16, 2, 16, DType::kF32, false, SlidingWindows{windows, 9});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rows(0), 16);
  EXPECT_EQ(c->max_step_tokens(), 0);  // no ring, no limit
  auto bad = KvCache::Create(3, 16, 2, 16, DType::kF32, false, SlidingWindows{windows, 4});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// A session's cache keeps a ring of window + n_batch rows on layer 0. Cut back far enough that
// the ring has reused the rows of the window before the cut, it must go on exactly as a
// session that only ever saw the kept tokens.
TEST(SlidingWindowCacheTest, TruncatingPastWhatTheRingHoldsComputesTheKeptTokensAgain) {
  auto engine = LoadGptOss();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> ids = PromptTokens("p2");
  SessionOptions o;
  o.n_ctx = 256;
  o.threads = 1;
  o.n_batch = 4;
  GenerateOptions g;
  g.max_tokens = 6;
  g.stop_at_eog = false;
  for (int64_t n_keep : {55, 40, 30, 12, 5}) {  // 55: the ring still holds its window
    SCOPED_TRACE("keep " + std::to_string(n_keep));
    auto cut = Session::Create(engine, o);
    auto fresh = Session::Create(engine, o);
    ASSERT_TRUE(cut.ok() && fresh.ok());
    ASSERT_TRUE((*cut)->Decode(ids).ok());
    ASSERT_TRUE((*cut)->Truncate(n_keep).ok());
    ASSERT_TRUE((*fresh)->Decode(absl::MakeConstSpan(ids).subspan(0, n_keep)).ok());
    ASSERT_TRUE((*fresh)->Truncate(n_keep).ok());  // both compute the last kept token again
    std::vector<int32_t> a, b;
    ASSERT_TRUE((*cut)
                    ->GenerateFromTokens({}, g,
                                         [&](int32_t t, absl::string_view) {
                                           if (t >= 0) a.push_back(t);
                                           return true;
                                         })
                    .ok());
    ASSERT_TRUE((*fresh)
                    ->GenerateFromTokens({}, g,
                                         [&](int32_t t, absl::string_view) {
                                           if (t >= 0) b.push_back(t);
                                           return true;
                                         })
                    .ok());
    EXPECT_EQ(a.size(), 6u);
    EXPECT_EQ(a, b);
    EXPECT_EQ((*cut)->history(), (*fresh)->history());
  }
}

}  // namespace
}  // namespace moe
