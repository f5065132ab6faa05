// The batching engine: whatever runs beside a request (other lengths, arrivals mid-run,
// cancellations, preemptions, shared prefixes), it gets the tokens and text a lone Session gives
// it; the paged cache is whole again at the end; bad input is a status.
#include "lib/runtime/batch_engine.h"

#include <atomic>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "lib/import/gguf_import.h"
#include "lib/kv/kv_type.h"
#include "lib/runtime/metrics_text.h"
#include "tests/model/reference_model.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/greedy.h"
#include "tests/support/random_engine.h"

namespace moe {
namespace {

const std::string kFixtures = std::string(MOE_TESTDATA_DIR) + "/fixtures/";

// A fixture by folder name, from the first set or the second (fixtures-v2: the newer families).
std::shared_ptr<const Engine> Load(const std::string& name) {
  auto e = Engine::Load(testing::FixtureGguf(testing::FixtureDir(name)), {});
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : nullptr;
}

// Prompts of different lengths, deterministic, inside the vocabulary (a shared start if given).
std::vector<std::vector<int32_t>> Prompts(const Engine& e, int count, uint32_t seed,
                                          std::vector<int32_t> prefix = {}) {
  std::mt19937 rng(seed);
  const int32_t v = static_cast<int32_t>(e.model()->hp().n_vocab);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p = prefix;
    const int len = 3 + static_cast<int>(rng() % 29);
    for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng() % (v - 3)));
    out.push_back(std::move(p));
  }
  return out;
}

using testing::Greedy;

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

Output Lone(std::shared_ptr<const Engine> e, const std::vector<int32_t>& prompt,
            const GenerateOptions& g, int64_t n_ctx = 256, int64_t n_batch = 0) {
  SessionOptions so;
  so.threads = 2;
  so.n_ctx = n_ctx;
  if (n_batch > 0) so.n_batch = n_batch;
  so.kv_type = DType::kF16;
  auto s = Session::Create(std::move(e), so);
  EXPECT_TRUE(s.ok());
  Output out;
  EXPECT_TRUE((*s)->GenerateFromTokens(prompt, g,
                                       [&](int32_t token, absl::string_view piece) {
                                         if (token >= 0) out.tokens.push_back(token);
                                         out.text.append(piece.data(), piece.size());
                                         return true;
                                       })
                  .ok());
  out.finish = (*s)->stats().finish;
  return out;
}

BatchEngineOptions CallerDriven() {
  BatchEngineOptions o;
  o.threads = 2;
  o.n_ctx = 256;
  o.block_size = 4;
  o.max_step_tokens = 16;  // prompts go in chunks
  o.own_thread = false;
  return o;
}

// Submits with a callback that collects the events, checking they arrive in order with one
// finish last.
struct Collector {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int finishes = 0;
  RequestCallback callback() {
    return [this](const RequestEvent& ev) {
      EXPECT_EQ(finishes, 0) << "an event after the finish";
      if (ev.finish != FinishReason::kNone) {
        ++finishes;
        finish = ev.finish;
      } else {
        tokens.push_back(ev.token);
      }
      text += ev.piece;
      return true;
    };
  }
};

void RunUntilIdle(BatchEngine& engine) {
  for (int i = 0; i < 100000; ++i) {
    auto worked = engine.Step();
    ASSERT_TRUE(worked.ok()) << worked.status();
    if (!*worked && engine.stats().running + engine.stats().waiting == 0) return;
  }
  FAIL() << "the engine never went idle";
}

// Submits every prompt with `generate`, each to its own collector, and steps until idle.
void SubmitAndRun(BatchEngine& engine, const std::vector<std::vector<int32_t>>& prompts,
                  const GenerateOptions& generate, std::vector<Collector>* got) {
  got->clear();
  got->resize(prompts.size());  // before any callback takes its address
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestOptions r;
    r.tokens = prompts[i];
    r.generate = generate;
    ASSERT_TRUE(engine.Submit(r, (*got)[i].callback()).ok());
  }
  RunUntilIdle(engine);
}

TEST(BatchEngineTest, GreedyRequestsGetTheirLoneSessionOutputWhateverRunsBeside) {
  // Every attention and routing variant: grouped-query (with sliding windows and sinks in
  // gpt-oss), latent attention whose cache rows are the latent (deepseek2), partial rotary
  // embedding with sigmoid group routing (glm4moe).
  for (const char* name : {"tiny-qwen2moe-q4_0", "tiny-llama-moe-q8_0", "tiny-deepseek3-q8_0",
                           "tiny-deepseek2lite-f32", "tiny-glm4moe-f32", "tiny-gptoss-mxfp4"}) {
    SCOPED_TRACE(name);
    auto e = Load(name);
    ASSERT_NE(e, nullptr);
    const auto prompts = Prompts(*e, 7, 3);
    std::vector<Output> want;
    for (size_t i = 0; i < prompts.size(); ++i) want.push_back(Lone(e, prompts[i], Greedy(9 + i)));

    auto engine = BatchEngine::Create(e, CallerDriven());
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<Collector> got(prompts.size());
    std::vector<uint64_t> ids;
    auto submit = [&](size_t i) {
      RequestOptions r;
      r.tokens = prompts[i];
      r.generate = Greedy(9 + i);
      auto id = (*engine)->Submit(r, got[i].callback());
      ASSERT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    };
    // Three at first, the others arriving while those run.
    for (size_t i = 0; i < 3; ++i) submit(i);
    for (size_t i = 3; i < prompts.size(); ++i) {
      for (int s = 0; s < 2; ++s) ASSERT_TRUE((*engine)->Step().ok());
      submit(i);
    }
    RunUntilIdle(**engine);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << name << " request " << i;
      EXPECT_EQ(got[i].text, want[i].text) << name << " request " << i;
      EXPECT_EQ(got[i].finish, want[i].finish) << name << " request " << i;
      EXPECT_EQ(got[i].finishes, 1);
      auto result = (*engine)->Wait(ids[i]);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->tokens, want[i].tokens);
      EXPECT_EQ(result->text, want[i].text);
      EXPECT_EQ(result->stats.generated_tokens, static_cast<int64_t>(want[i].tokens.size()));
      EXPECT_EQ((*engine)->Wait(ids[i]).status().code(), absl::StatusCode::kNotFound);
    }
    const BatchEngineStats st = (*engine)->stats();
    EXPECT_EQ(st.kv_blocks_in_use, 0) << "every block given back";
    EXPECT_GT(st.mean_sequences_per_step, 1.5) << "requests ran together";
    EXPECT_EQ(st.finished, static_cast<int64_t>(prompts.size()));
    // Where the steps' time went: each stage that ran is timed, within the steps' time.
    EXPECT_GT(st.time.attention_s, 0);
    EXPECT_GT(st.time.experts_s, 0);
    EXPECT_GT(st.time.head_s, 0);
    EXPECT_LE(st.time.attention_s + st.time.router_s + st.time.experts_s + st.time.head_s +
                  st.time.other_s,
              st.step_s);
  }
}

TEST(BatchEngineTest, SeededSamplingIsTheLoneSessionsPerSeed) {
  auto e = Load("tiny-qwen2moe-q4_0");
  ASSERT_NE(e, nullptr);
  const auto prompts = Prompts(*e, 4, 8);
  auto engine = BatchEngine::Create(e, CallerDriven());
  ASSERT_TRUE(engine.ok());
  std::vector<Collector> got(prompts.size());
  std::vector<GenerateOptions> opts;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions g = Greedy(12);
    g.sampling.temperature = 0.9f;
    g.sampling.seed = 100 + i;
    g.sampling.repeat_penalty = 1.1f;
    opts.push_back(g);
    RequestOptions r;
    r.tokens = prompts[i];
    r.generate = g;
    ASSERT_TRUE((*engine)->Submit(r, got[i].callback()).ok());
  }
  RunUntilIdle(**engine);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, Lone(e, prompts[i], opts[i]).tokens) << "request " << i;
  }
}

TEST(BatchEngineTest, PreemptedRequestsAreComputedAgainAndLoseNothing) {
  // Grouped-query rows, and latent attention's rows (the latent and the rope part).
  for (const char* name : {"tiny-qwen2moe-q4_0", "tiny-deepseek3-q8_0"}) {
    SCOPED_TRACE(name);
    auto e = Load(name);
    ASSERT_NE(e, nullptr);
    const auto prompts = Prompts(*e, 5, 21);
    BatchEngineOptions o = CallerDriven();
    o.kv_tokens = 96;  // 24 blocks of 4: not enough for five requests of up to 31 + 24 tokens
    o.prefix_sharing = false;
    auto engine = BatchEngine::Create(e, o);
    ASSERT_TRUE(engine.ok());
    std::vector<Collector> got;
    SubmitAndRun(**engine, prompts, Greedy(24), &got);
    EXPECT_GT((*engine)->stats().preemptions, 0) << "the test should make the cache overflow";
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Output want = Lone(e, prompts[i], Greedy(24));
      EXPECT_EQ(got[i].tokens, want.tokens) << "request " << i;
      EXPECT_EQ(got[i].text, want.text) << "request " << i;
    }
    EXPECT_EQ((*engine)->stats().kv_blocks_in_use, 0);
  }
}

TEST(BatchEngineTest, WithoutPreemptionARequestThatCannotGrowEndsContextFull) {
  auto e = Load("tiny-qwen2moe-q4_0");
  ASSERT_NE(e, nullptr);
  const auto prompts = Prompts(*e, 4, 5);
  BatchEngineOptions o = CallerDriven();
  o.kv_tokens = 64;
  o.when_full = WhenKvFull::kFinish;
  auto engine = BatchEngine::Create(e, o);
  ASSERT_TRUE(engine.ok());
  std::vector<Collector> got;
  SubmitAndRun(**engine, prompts, Greedy(40), &got);
  int full = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].finishes, 1);
    if (got[i].finish == FinishReason::kContextFull) {
      ++full;
      // What it produced before is the lone session's start.
      const Output want = Lone(e, prompts[i], Greedy(40));
      ASSERT_LE(got[i].tokens.size(), want.tokens.size());
      EXPECT_TRUE(std::equal(got[i].tokens.begin(), got[i].tokens.end(), want.tokens.begin()));
    }
  }
  EXPECT_GT(full, 0);
  EXPECT_EQ((*engine)->stats().preemptions, 0);
  EXPECT_EQ((*engine)->stats().kv_blocks_in_use, 0);
}

TEST(BatchEngineTest, ASharedPrefixIsComputedOnceAndChangesNoOutput) {
  // Shared blocks of grouped-query rows, and of latent attention's rows.
  for (const char* name : {"tiny-llama-moe-q8_0", "tiny-deepseek3-q8_0"}) {
    SCOPED_TRACE(name);
    auto e = Load(name);
    ASSERT_NE(e, nullptr);
    const std::vector<int32_t> system = Prompts(*e, 1, 77)[0];
    std::vector<int32_t> prefix;
    for (int i = 0; i < 3; ++i) prefix.insert(prefix.end(), system.begin(), system.end());
    const auto prompts = Prompts(*e, 4, 9, prefix);
    std::vector<std::vector<Collector>> got(2, std::vector<Collector>(prompts.size()));
    std::vector<int64_t> reused;
    for (bool sharing : {false, true}) {
      BatchEngineOptions o = CallerDriven();
      o.prefix_sharing = sharing;
      auto engine = BatchEngine::Create(e, o);
      ASSERT_TRUE(engine.ok());
      std::vector<uint64_t> ids;
      for (size_t i = 0; i < prompts.size(); ++i) {
        RequestOptions r;
        r.tokens = prompts[i];
        r.generate = Greedy(10);
        ids.push_back(*(*engine)->Submit(r, got[sharing][i].callback()));
        if (i == 0) RunUntilIdle(**engine);  // the first one fills the cache with the prefix
      }
      RunUntilIdle(**engine);
      for (uint64_t id : ids) reused.push_back((*engine)->Wait(id)->stats.prefix_tokens_reused);
    }
    const int64_t whole_blocks = static_cast<int64_t>(prefix.size()) / 4 * 4;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[1][i].tokens, got[0][i].tokens) << "request " << i;
      EXPECT_EQ(reused[i], 0) << "no sharing, request " << i;
      EXPECT_GE(reused[prompts.size() + i], i == 0 ? 0 : whole_blocks) << "request " << i;
    }
    EXPECT_EQ(reused[prompts.size()], 0);
  }
}

// gpt-oss slides on alternate layers (the fixture's window: 8 positions). Those layers hold only
// the blocks their window reads; the output is still the lone session's (whose cache is a ring),
// with shared prefixes, requests arriving mid-run, and preemption.
TEST(BatchEngineTest, SlidingWindowLayersHoldOnlyTheirWindowAndChangeNoOutput) {
  auto loaded = Engine::Load(
      std::string(MOE_TESTDATA_DIR) + "/fixtures-v2/tiny-gptoss-f32/tiny-gptoss-f32.gguf", {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const Engine> e = *loaded;
  const std::vector<int64_t>& windows = e->model()->attention_windows();
  ASSERT_EQ(*std::max_element(windows.begin(), windows.end()), 8);
  const std::vector<int32_t> system = Prompts(*e, 1, 31)[0];
  std::vector<int32_t> prefix;
  for (int i = 0; i < 2; ++i) prefix.insert(prefix.end(), system.begin(), system.end());
  const auto prompts = Prompts(*e, 6, 13, prefix);
  std::vector<Output> want;
  for (size_t i = 0; i < prompts.size(); ++i) want.push_back(Lone(e, prompts[i], Greedy(12 + i)));
  for (int64_t kv_tokens : {0, 96}) {  // the default, and too few blocks for all at once
    BatchEngineOptions o = CallerDriven();
    o.kv_tokens = kv_tokens;
    auto engine = BatchEngine::Create(e, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    BatchEngineStats st = (*engine)->stats();
    EXPECT_GT(st.kv_window_blocks, 0);
    EXPECT_LE(st.kv_window_blocks, st.kv_blocks);
    std::vector<Collector> got(prompts.size());
    auto submit = [&](size_t i) {
      RequestOptions r;
      r.tokens = prompts[i];
      r.generate = Greedy(12 + i);
      ASSERT_TRUE((*engine)->Submit(r, got[i].callback()).ok());
    };
    submit(0);
    RunUntilIdle(**engine);  // its blocks, windows too, stay cached for the others' prefix
    int32_t most_window_blocks = 0, most_blocks = 0;
    for (size_t i = 1; i < prompts.size(); ++i) {
      submit(i);
      for (int s = 0; s < 3; ++s) {
        ASSERT_TRUE((*engine)->Step().ok());
        st = (*engine)->stats();
        most_window_blocks = std::max(most_window_blocks, st.kv_window_blocks_in_use);
        most_blocks = std::max(most_blocks, st.kv_blocks_in_use);
      }
    }
    RunUntilIdle(**engine);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "kv_tokens " << kv_tokens << " request " << i;
      EXPECT_EQ(got[i].text, want[i].text) << "kv_tokens " << kv_tokens << " request " << i;
    }
    st = (*engine)->stats();
    if (kv_tokens == 0) {
      EXPECT_GE(st.prefix_tokens_reused, 5 * static_cast<int64_t>(prefix.size() / 4 * 4))
          << "the later requests reuse the shared prefix, windows included";
    } else {
      EXPECT_GT(st.preemptions, 0) << "the test should make the cache overflow";
    }
    // A request's window (7 earlier positions) and a step (up to 16) in blocks of 4: at most 7
    // blocks, where its whole-context layers hold up to 24.
    EXPECT_LE(most_window_blocks, 7 * static_cast<int32_t>(prompts.size()));
    EXPECT_LT(most_window_blocks, most_blocks);
    EXPECT_EQ(st.kv_window_blocks_in_use, 0);
    EXPECT_EQ(st.kv_blocks_in_use, 0);
  }
}

using testing::RandomEngine;

// Submits each prompt one step after the other (greedy, 20 + i tokens) into an engine of
// window-keeping layers, at the default cache and at one too small for all at once (which must
// preempt), and expects the lone sessions' outputs, shared prefixes reused (unless sharing is
// off) and every block back.
// What a model's layers keep besides whole-context rows: window blocks, or convolution slots.
enum class Keeps { kWindows, kSlots };

void ExpectLoneOutputsFromWindowLayers(std::shared_ptr<const Engine> e,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       const std::vector<Output>& want,
                                       Keeps keeps = Keeps::kWindows, bool sharing = true) {
  for (int64_t kv_tokens : {0, 96}) {  // the default, and too few blocks for all at once
    BatchEngineOptions o = CallerDriven();
    o.kv_tokens = kv_tokens;
    o.prefix_sharing = sharing;
    auto engine = BatchEngine::Create(e, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    if (keeps == Keeps::kWindows) {
      EXPECT_GT((*engine)->stats().kv_window_blocks, 0);
    } else {
      // A live slot per sequence and, for the snapshots of shared prefixes, a spare one; no
      // window blocks.
      EXPECT_EQ((*engine)->stats().kv_state_slots, (sharing ? 2 : 1) * o.max_sequences);
      EXPECT_EQ((*engine)->stats().kv_window_blocks, 0);
    }
    std::vector<Collector> got(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      RequestOptions r;
      r.tokens = prompts[i];
      r.generate = Greedy(20 + i);
      ASSERT_TRUE((*engine)->Submit(r, got[i].callback()).ok());
      ASSERT_TRUE((*engine)->Step().ok());
    }
    RunUntilIdle(**engine);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "kv_tokens " << kv_tokens << " request " << i;
      EXPECT_EQ(got[i].text, want[i].text) << "kv_tokens " << kv_tokens << " request " << i;
    }
    const BatchEngineStats st = (*engine)->stats();
    if (kv_tokens > 0) {
      EXPECT_GT(st.preemptions, 0) << "the test should make the cache overflow";
    }
    EXPECT_EQ(st.prefix_tokens_reused > 0, sharing);
    EXPECT_EQ(st.kv_window_blocks_in_use, 0);
    EXPECT_EQ(st.kv_blocks_in_use, 0);
    EXPECT_EQ(st.kv_state_slots_in_use, 0);
    if (keeps == Keeps::kSlots) {
      EXPECT_EQ(st.kv_state_slots_cached > 0, sharing)
          << "snapshots stay at the ends of cached prefixes, and only for prefixes to reuse";
      const std::string text = EngineMetricsText(st);
      EXPECT_NE(text.find("moe_engine_kv_state_slots{state=\"in_use\"} 0\n"), std::string::npos)
          << text;
    }
  }
}

// A model whose convolution layers carry slots: each of five prompts sharing a prefix gives a
// session stepping 5 tokens at a time the lone session's tokens, and the engine gives them too,
// with prefix sharing and without it (one slot a request then).
void ExpectLoneOutputsFromSlots(std::shared_ptr<const Engine> e, uint32_t prefix_seed,
                                uint32_t prompt_seed) {
  const std::vector<int32_t> prefix = Prompts(*e, 1, prefix_seed)[0];
  const auto prompts = Prompts(*e, 5, prompt_seed, prefix);
  std::vector<Output> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    want.push_back(Lone(e, prompts[i], Greedy(20 + i)));
    const Output stepped = Lone(e, prompts[i], Greedy(20 + i), 256, /*n_batch=*/5);
    EXPECT_EQ(stepped.tokens, want.back().tokens) << "request " << i;
  }
  for (const bool sharing : {true, false}) {
    SCOPED_TRACE(sharing ? "prefix sharing" : "no prefix sharing");
    ExpectLoneOutputsFromWindowLayers(e, prompts, want, Keeps::kSlots, sharing);
  }
}

// Llama 4's chunked layers (chunks of 8 here) hold the blocks of a window of a chunk, as sliding
// layers do; a query reads back only to its chunk's start, so the output is still the lone
// session's, over several chunks, with shared prefixes and preemption.
TEST(BatchEngineTest, ChunkedLayersHoldOnlyAChunkAndChangeNoOutput) {
  testing::RandomModelOptions m;
  m.arch = Arch::kLlama4;
  m.n_layer = 4, m.n_expert_used = 1, m.n_ff_shared = 40, m.attention_chunk = 8;
  m.temperature_floor = 16;
  std::shared_ptr<const Engine> e = RandomEngine(m);
  ASSERT_NE(e, nullptr);
  const std::vector<int64_t>& windows = e->model()->attention_windows();
  ASSERT_EQ(windows, (std::vector<int64_t>{8, 8, 8, 0}));
  const std::vector<int32_t> prefix = Prompts(*e, 1, 41)[0];
  const auto prompts = Prompts(*e, 5, 43, prefix);
  std::vector<Output> want;
  for (size_t i = 0; i < prompts.size(); ++i) want.push_back(Lone(e, prompts[i], Greedy(20 + i)));
  ExpectLoneOutputsFromWindowLayers(e, prompts, want);
}

// LFM2's short-convolution layers carry the rows of their kernel's last positions in a slot (a
// session's one, the engine's live and snapshot slots); the output is the lone session's
// whatever the step sizes, with shared prefixes and preemption.
TEST(BatchEngineTest, ConvolutionLayersHoldOnlyTheirKernelAndChangeNoOutput) {
  testing::RandomModelOptions m;
  m.arch = Arch::kLfm2Moe;
  m.n_layer = 4, m.short_conv_layers = {0, 1, 3}, m.n_layer_dense = 1, m.n_ff_dense = 40;
  m.selection_bias = true, m.seed = 29;
  std::shared_ptr<const Engine> e = RandomEngine(m);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->model()->attention_windows(), (std::vector<int64_t>{0, 0, 0, 0}));
  ASSERT_EQ(e->model()->conv_rows(), (std::vector<int64_t>{2, 2, 0, 2}));
  ExpectLoneOutputsFromSlots(e, 47, 53);
}

// Granite-4.0-H's Mamba-2 layers carry their convolution's last inputs and their recurrent state
// in slots: a prompt that shares a cached prefix starts from the snapshot its last block kept, a
// preempted request from its own kept blocks'. The output is the lone session's whatever the
// step sizes.
TEST(BatchEngineTest, RecurrentLayersCarryTheirStateAcrossBlocksAndChangeNoOutput) {
  testing::RandomModelOptions m;
  m.arch = Arch::kGraniteHybrid;
  m.n_layer = 3, m.ssm_layers = {0, 2}, m.n_ff_shared = 40, m.residual_scale = 0.5f;
  m.seed = 31;
  std::shared_ptr<const Engine> e = RandomEngine(m);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->model()->attention_windows(), (std::vector<int64_t>{0, 0, 0}));
  ExpectLoneOutputsFromSlots(e, 59, 61);
}

// Qwen3.5-MoE's gated delta nets carry their convolution's rows and each value head's state in
// slots as Mamba-2's do; with prefix sharing, preemption and 5-token session steps the output
// is still the lone session's.
TEST(BatchEngineTest, GatedDeltaNetsCarryTheirStateInSlotsAndChangeNoOutput) {
  testing::RandomModelOptions m;
  m.arch = Arch::kQwen35Moe;
  m.n_layer = 4, m.ssm_layers = {0, 1, 3}, m.ssm_heads = 4, m.ssm_groups = 2, m.ssm_state = 16;
  m.rope_dim = 8, m.n_ff_shared = 40, m.seed = 41;
  std::shared_ptr<const Engine> e = RandomEngine(m);
  ASSERT_NE(e, nullptr);
  ExpectLoneOutputsFromSlots(e, 73, 79);
}

// Nemotron-H's layers of one part: the expert layers cache nothing, the Mamba-2 layers carry their
// state from block to block, and the output is the lone session's.
TEST(BatchEngineTest, LayersOfOnePartCacheWhatTheirPartNeedsAndChangeNoOutput) {
  testing::RandomModelOptions m;
  m.arch = Arch::kNemotronHMoe;
  m.n_layer = 5, m.layer_pattern = "ME*EM", m.n_ff_shared = 40, m.selection_bias = true;
  m.seed = 37;
  std::shared_ptr<const Engine> e = RandomEngine(m);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->model()->attention_windows(), (std::vector<int64_t>{0, 0, 0, 0, 0}));
  const HParams& h = e->model()->hp();
  const int64_t C = h.ssm_conv_channels();
  EXPECT_EQ(e->model()->conv_widths(), (std::vector<int64_t>{C, kNoKvRows, 0, kNoKvRows, C}));
  // K and V of the one attention layer a token; the expert layers keep nothing.
  EXPECT_EQ(KvBytesPerToken(h, DType::kF16), 2 * RowBytes(DType::kF16, h.n_head_kv * h.head_dim));
  const std::vector<int32_t> prefix = Prompts(*e, 1, 67)[0];
  const auto prompts = Prompts(*e, 5, 71, prefix);
  std::vector<Output> want;
  for (size_t i = 0; i < prompts.size(); ++i) want.push_back(Lone(e, prompts[i], Greedy(20 + i)));
  ExpectLoneOutputsFromWindowLayers(e, prompts, want, Keeps::kSlots);
}

TEST(BatchEngineTest, CancellingFreesTheRequestAndOnlyIt) {
  auto e = Load("tiny-qwen2moe-q4_0");
  ASSERT_NE(e, nullptr);
  const auto prompts = Prompts(*e, 3, 4);
  auto engine = BatchEngine::Create(e, CallerDriven());
  ASSERT_TRUE(engine.ok());
  std::vector<Collector> got(3);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    RequestOptions r;
    r.tokens = prompts[i];
    r.generate = Greedy(30);
    ids.push_back(*(*engine)->Submit(r, got[i].callback()));
  }
  for (int s = 0; s < 4; ++s) ASSERT_TRUE((*engine)->Step().ok());
  ASSERT_TRUE((*engine)->Cancel(ids[1]).ok());
  RunUntilIdle(**engine);
  auto cancelled = (*engine)->Wait(ids[1]);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->finish, FinishReason::kCancelled);
  EXPECT_EQ(cancelled->status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(got[1].finish, FinishReason::kCancelled);
  for (int i : {0, 2}) EXPECT_EQ(got[i].tokens, Lone(e, prompts[i], Greedy(30)).tokens);
  EXPECT_EQ((*engine)->stats().kv_blocks_in_use, 0);
  EXPECT_TRUE((*engine)->Cancel(ids[1]).ok()) << "cancelling a finished request is no error";
}

TEST(BatchEngineTest, ACallbackThatSaysStopEndsOnlyItsRequest) {
  auto e = Load("tiny-qwen2moe-q4_0");
  ASSERT_NE(e, nullptr);
  const auto prompts = Prompts(*e, 2, 6);
  auto engine = BatchEngine::Create(e, CallerDriven());
  ASSERT_TRUE(engine.ok());
  int seen = 0;
  RequestOptions r;
  r.tokens = prompts[0];
  r.generate = Greedy(20);
  auto stopper = (*engine)->Submit(
      r, [&](const RequestEvent& ev) { return ev.finish != FinishReason::kNone || ++seen < 3; });
  Collector other;
  r.tokens = prompts[1];
  auto goes_on = (*engine)->Submit(r, other.callback());
  RunUntilIdle(**engine);
  auto a = (*engine)->Wait(*stopper);
  EXPECT_EQ(a->finish, FinishReason::kCallback);
  EXPECT_EQ(a->tokens.size(), 3u);
  EXPECT_EQ((*engine)->Wait(*goes_on)->tokens, Lone(e, prompts[1], Greedy(20)).tokens);
}

TEST(BatchEngineTest, BadInputIsAStatusWithAMessage) {
  auto e = Load("tiny-qwen2moe-q4_0");
  ASSERT_NE(e, nullptr);
  BatchEngineOptions o = CallerDriven();
  o.block_size = 3;
  EXPECT_EQ(BatchEngine::Create(e, o).status().code(), absl::StatusCode::kInvalidArgument);
  o = CallerDriven();
  o.max_sequences = 0;
  EXPECT_EQ(BatchEngine::Create(e, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchEngine::Create(nullptr, CallerDriven()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A cache larger than the memory is refused before it is touched, saying what to ask for.
  o = CallerDriven();
  o.kv_bytes = size_t{1} << 50;
  auto too_big = BatchEngine::Create(e, o);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("of memory available"), std::string::npos)
      << too_big.status();
  EXPECT_NE(too_big.status().message().find("kv_bytes"), std::string::npos) << too_big.status();
  o = CallerDriven();
  o.kv_tokens = 16;
  auto engine = BatchEngine::Create(e, o);
  ASSERT_TRUE(engine.ok());
  RequestOptions r;
  r.tokens = {1, static_cast<int32_t>(e->model()->hp().n_vocab)};
  EXPECT_EQ((*engine)->Submit(r, nullptr).status().code(), absl::StatusCode::kOutOfRange);
  r.tokens.assign(300, 5);  // past n_ctx
  EXPECT_EQ((*engine)->Submit(r, nullptr).status().code(), absl::StatusCode::kResourceExhausted);
  r.tokens.assign(20, 5);  // past the whole cache of 16 positions
  auto never = (*engine)->Submit(r, nullptr);
  EXPECT_EQ(never.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(never.status().message().find("never fit"), std::string::npos) << never.status();
  r.tokens = {5, 6};
  r.generate.max_tokens = -1;
  EXPECT_EQ((*engine)->Submit(r, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->Cancel(12345).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*engine)->Wait(12345).status().code(), absl::StatusCode::kNotFound);
  // Waiting from a callback on an unfinished request would deadlock: refused.
  r.generate = Greedy(4);
  absl::Status from_callback;
  uint64_t self = 0;
  auto id = (*engine)->Submit(r, [&](const RequestEvent& ev) {
    if (ev.finish == FinishReason::kNone && from_callback.ok()) {
      from_callback = (*engine)->Wait(self).status();
    }
    return true;
  });
  ASSERT_TRUE(id.ok());
  self = *id;
  RunUntilIdle(**engine);
  EXPECT_EQ(from_callback.code(), absl::StatusCode::kFailedPrecondition) << from_callback;
  // A detached request keeps no result.
  r.keep_result = false;
  auto detached = (*engine)->Submit(r, nullptr);
  ASSERT_TRUE(detached.ok());
  EXPECT_EQ((*engine)->Wait(*detached).status().code(), absl::StatusCode::kFailedPrecondition);
  RunUntilIdle(**engine);
  // An engine with its own thread is not stepped by hand.
  auto threaded = BatchEngine::Create(e, BatchEngineOptions{});
  ASSERT_TRUE(threaded.ok());
  EXPECT_EQ((*threaded)->Step().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BatchEngineTest, ExpertsFromTheDiskTierGiveTheResidentOutput) {
  auto resident = Load("tiny-qwen2moe-q4_0");
  ASSERT_NE(resident, nullptr);
  LoadOptions lo;
  lo.expert_cache_fraction = 0.3;  // most experts read from the file as steps need them
  auto cached = Engine::Load(kFixtures + "tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf", lo);
  ASSERT_TRUE(cached.ok()) << cached.status();
  ASSERT_NE((*cached)->expert_store(), nullptr);
  const auto prompts = Prompts(*resident, 5, 31);
  auto engine = BatchEngine::Create(*cached, CallerDriven());
  ASSERT_TRUE(engine.ok());
  std::vector<Collector> got;
  SubmitAndRun(**engine, prompts, Greedy(10), &got);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, Lone(resident, prompts[i], Greedy(10)).tokens) << "request " << i;
  }
  EXPECT_GT((*cached)->expert_store()->cache().stats().misses, 0);
}

// Many threads submitting, waiting and cancelling at random on an engine with its own scheduler
// thread: every request finishes once, the cache is whole at the end (run under ThreadSanitizer).
TEST(BatchEngineStressTest, ThreadsSubmitAndCancelAtRandom) {
  auto e = Load("tiny-qwen2moe-q4_0");
  ASSERT_NE(e, nullptr);
  BatchEngineOptions o;
  o.threads = 2;
  o.n_ctx = 128;
  o.block_size = 8;
  o.kv_tokens = 256;  // small: preemption happens too
  o.max_sequences = 6;
  auto engine = BatchEngine::Create(e, o);
  ASSERT_TRUE(engine.ok());
  const auto prompts = Prompts(*e, 8, 13);
  std::atomic<int> finishes{0}, submitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 20; ++i) {
        RequestOptions r;
        r.tokens = prompts[rng() % prompts.size()];
        r.generate = Greedy(4 + rng() % 12);
        r.keep_result = i % 5 != 4;  // some only stream
        auto id = (*engine)->Submit(r, [&](const RequestEvent& ev) {
          if (ev.finish != FinishReason::kNone) ++finishes;
          return true;
        });
        ASSERT_TRUE(id.ok());
        ++submitted;
        if (rng() % 3 == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 5));
          EXPECT_TRUE((*engine)->Cancel(*id).ok());
        }
        if (!r.keep_result) continue;
        auto result = (*engine)->Wait(*id, 60);
        ASSERT_TRUE(result.ok()) << result.status();
        EXPECT_TRUE(result->finish == FinishReason::kMaxTokens ||
                    result->finish == FinishReason::kCancelled);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 6000 && (*engine)->stats().finished < submitted.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the streaming-only ones
  }
  EXPECT_EQ(finishes.load(), submitted.load());
  const BatchEngineStats st = (*engine)->stats();
  EXPECT_EQ(st.finished, submitted.load());
  EXPECT_EQ(st.kv_blocks_in_use, 0);
}

}  // namespace
}  // namespace moe
