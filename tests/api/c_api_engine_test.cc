// The batching engine through the C ABI, as an application sees it (only moe_c.h): requests
// from many threads get a lone context's text, cancellation, waiting with and without blocking,
// caller-driven steps, freeing with waiters, and every misuse a status.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "moe_c.h"

namespace {

const std::string kModel =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf";

const char* const kPrompts[] = {"Hello",
                                "The quick brown fox",
                                "Once upon a time, in a land",
                                "1 2 3 4 5",
                                "What is a mixture of experts?",
                                "Bonjour",
                                "A",
                                "Attention is all you need, they said"};

struct Stream {
  std::mutex mu;
  std::string text, final_text;
  int32_t finish = MOE_FINISH_NONE;
  int finishes = 0;
  int tokens = 0;
  int stop_after = -1;  // return 0 after this many tokens
};

int Collect(const moe_request_event* ev, void* user_data) {
  auto* s = static_cast<Stream*>(user_data);
  std::lock_guard<std::mutex> lock(s->mu);
  s->text.append(ev->piece, ev->piece_len);
  if (ev->finish_reason != MOE_FINISH_NONE) {
    ++s->finishes;
    s->finish = ev->finish_reason;
    // The last event carries the whole result.
    EXPECT_NE(ev->result, nullptr);
    if (ev->result != nullptr) s->final_text = moe_request_result_text(ev->result);
    return 1;
  }
  EXPECT_EQ(ev->result, nullptr);
  ++s->tokens;
  return s->stop_after < 0 || s->tokens < s->stop_after;
}

class CApiEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &model_), MOE_OK) << moe_last_error();
  }
  static void TearDownTestSuite() {
    moe_model_free(model_);
    model_ = nullptr;
  }

  static moe_sampling_params Greedy() {
    moe_sampling_params s = moe_sampling_default_params();
    s.temperature = 0;
    return s;
  }

  // What a lone context generates for the prompt (F16 KV, as the engine's).
  static std::string Lone(const char* prompt, int32_t max_tokens, float expert_confidence = 0) {
    moe_context_params cp = moe_context_default_params();
    cp.expert_confidence = expert_confidence;
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.kv_type = MOE_KV_F16;
    moe_context* ctx = nullptr;
    EXPECT_EQ(moe_context_create(model_, &cp, &ctx), MOE_OK) << moe_last_error();
    moe_sampling_params sp = Greedy();
    moe_generate_params gp = moe_generate_default_params();
    gp.sampling = &sp;
    gp.max_tokens = max_tokens;
    std::string text;
    EXPECT_EQ(moe_generate(
                  ctx, prompt, &gp,
                  [](int32_t, const char* piece, size_t len, void* u) {
                    static_cast<std::string*>(u)->append(piece, len);
                    return 1;
                  },
                  &text),
              MOE_OK)
        << moe_last_error();
    moe_context_free(ctx);
    return text;
  }

  static moe_engine* NewEngine(int32_t own_thread = 1, int64_t kv_tokens = 0,
                               float expert_confidence = 0) {
    moe_engine_params p = moe_engine_default_params();
    p.expert_confidence = expert_confidence;
    p.n_threads = 2;
    p.n_ctx = 256;
    p.own_thread = own_thread;
    p.kv_tokens = kv_tokens;
    p.kv_block_size = 8;
    moe_engine* e = nullptr;
    EXPECT_EQ(moe_engine_create(model_, &p, &e), MOE_OK) << moe_last_error();
    return e;
  }

  static moe_status Submit(moe_engine* e, const char* prompt, int32_t max_tokens, Stream* stream,
                           moe_request_id* id) {
    moe_sampling_params sp = Greedy();
    moe_generate_params gp = moe_generate_default_params();
    gp.sampling = &sp;
    gp.max_tokens = max_tokens;
    moe_request_params rp = moe_request_default_params();
    rp.prompt = prompt;
    rp.generate = &gp;
    return moe_engine_submit(e, &rp, stream ? Collect : nullptr, stream, id);
  }

  static moe_model* model_;
};

moe_model* CApiEngineTest::model_ = nullptr;

TEST_F(CApiEngineTest, ThreadsSubmittingAtOnceGetWhatALoneContextGenerates) {
  moe_engine* e = NewEngine();
  ASSERT_NE(e, nullptr);
  constexpr int kN = sizeof(kPrompts) / sizeof(kPrompts[0]);
  std::vector<Stream> streams(kN);
  std::vector<std::string> results(kN);
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      moe_request_id id = 0;
      ASSERT_EQ(Submit(e, kPrompts[i], 10 + i, &streams[i], &id), MOE_OK) << moe_last_error();
      moe_request_result* r = nullptr;
      ASSERT_EQ(moe_engine_wait(e, id, -1, &r), MOE_OK) << moe_last_error();
      results[i] = moe_request_result_text(r);
      size_t n = 0;
      EXPECT_NE(moe_request_result_tokens(r, &n), nullptr);
      moe_request_stats st = moe_default_request_stats();
      ASSERT_EQ(moe_request_result_get_stats(r, &st), MOE_OK);
      EXPECT_EQ(st.status, MOE_OK);
      EXPECT_EQ(static_cast<size_t>(st.generated_tokens), n);
      EXPECT_GE(st.first_token_seconds, st.queue_seconds);
      moe_request_result_free(r);
      // Handed over: a second wait finds nothing.
      EXPECT_EQ(moe_engine_wait(e, id, 0, &r), MOE_ERROR_NOT_FOUND);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(results[i], Lone(kPrompts[i], 10 + i)) << kPrompts[i];
    EXPECT_EQ(streams[i].text, results[i]) << "the events carry the whole text";
    EXPECT_EQ(streams[i].final_text, results[i]);
    EXPECT_EQ(streams[i].finishes, 1);
  }
  moe_engine_stats st = moe_default_engine_stats();
  ASSERT_EQ(moe_engine_get_stats(e, &st), MOE_OK);
  EXPECT_EQ(st.finished, kN);
  EXPECT_EQ(st.kv_blocks_in_use, 0);
  EXPECT_EQ(st.kv_window_blocks, 0) << "no layer slides";
  EXPECT_GT(st.kv_bytes, 0);
  moe_engine_free(e);
}

// A model whose layers slide on alternate layers (gpt-oss) keeps their rows in blocks of their
// own, far fewer than the whole-context layers', and says so in the stats and the metrics.
TEST(CApiEngineWindowTest, SlidingWindowLayersHaveTheirOwnBlocks) {
  const std::string path =
      std::string(MOE_TESTDATA_DIR) + "/fixtures-v2/tiny-gptoss-f32/tiny-gptoss-f32.gguf";
  moe_model* model = nullptr;
  ASSERT_EQ(moe_model_load(path.c_str(), nullptr, &model), MOE_OK) << moe_last_error();
  moe_engine_params p = moe_engine_default_params();
  p.n_threads = 2;
  p.n_ctx = 256;
  p.kv_block_size = 8;
  moe_engine* e = nullptr;
  ASSERT_EQ(moe_engine_create(model, &p, &e), MOE_OK) << moe_last_error();
  moe_sampling_params sp = moe_sampling_default_params();
  sp.temperature = 0;
  moe_generate_params gp = moe_generate_default_params();
  gp.sampling = &sp;
  gp.max_tokens = 24;
  moe_request_params rp = moe_request_default_params();
  rp.prompt = "Once upon a time, in a land far away, there lived";
  rp.generate = &gp;
  moe_request_id id = 0;
  ASSERT_EQ(moe_engine_submit(e, &rp, nullptr, nullptr, &id), MOE_OK) << moe_last_error();
  moe_request_result* r = nullptr;
  ASSERT_EQ(moe_engine_wait(e, id, -1, &r), MOE_OK) << moe_last_error();
  moe_request_result_free(r);
  moe_engine_stats st = moe_default_engine_stats();
  ASSERT_EQ(moe_engine_get_stats(e, &st), MOE_OK);
  EXPECT_GT(st.kv_window_blocks, 0);
  EXPECT_LT(st.kv_window_blocks, st.kv_blocks);
  EXPECT_EQ(st.kv_window_blocks_in_use, 0);
  EXPECT_GT(st.kv_window_blocks_cached, 0) << "the prompt's windows stay with its blocks";
  EXPECT_GT(st.kv_bytes, 0);
  size_t n = 0;
  ASSERT_EQ(moe_engine_metrics_text(e, nullptr, 0, &n), MOE_ERROR_BUFFER_TOO_SMALL);
  std::string text(n + 1, '\0');
  ASSERT_EQ(moe_engine_metrics_text(e, text.data(), text.size(), &n), MOE_OK);
  EXPECT_NE(text.find("moe_engine_kv_window_blocks{state=\"in_use\"} 0\n"), std::string::npos)
      << text;
  moe_engine_free(e);
  moe_model_free(model);
}

// An engine's routing policy applies to every request, token for token as in a lone context with
// the same policy (a token's routing does not depend on its batch); out-of-range values are
// refused.
TEST_F(CApiEngineTest, ExpertConfidenceRoutesRequestsAsALoneContext) {
  moe_engine* e = NewEngine(1, 0, 0.5f);
  ASSERT_NE(e, nullptr);
  constexpr int kN = sizeof(kPrompts) / sizeof(kPrompts[0]);
  std::vector<moe_request_id> ids(kN);
  for (int i = 0; i < kN; ++i) ASSERT_EQ(Submit(e, kPrompts[i], 8, nullptr, &ids[i]), MOE_OK);
  for (int i = 0; i < kN; ++i) {
    moe_request_result* r = nullptr;
    ASSERT_EQ(moe_engine_wait(e, ids[i], -1, &r), MOE_OK) << moe_last_error();
    EXPECT_EQ(std::string(moe_request_result_text(r)), Lone(kPrompts[i], 8, 0.5f)) << kPrompts[i];
    moe_request_result_free(r);
  }
  moe_engine_free(e);
  moe_engine_params p = moe_engine_default_params();
  EXPECT_EQ(p.min_experts, 1);
  p.expert_confidence = 1.5f;
  moe_engine* out = nullptr;
  EXPECT_EQ(moe_engine_create(model_, &p, &out), MOE_ERROR_INVALID_ARGUMENT);
  p = moe_engine_default_params();
  p.expert_confidence = 0.5f;
  p.min_experts = 0;
  EXPECT_EQ(moe_engine_create(model_, &p, &out), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
}

// Capacity and load-aware re-weighting on an engine: defaults off, counted in the engine's
// statistics, bad values refused.
TEST_F(CApiEngineTest, CapacityAndLoadAwareReweightingAreCounted) {
  moe_engine_params p = moe_engine_default_params();
  EXPECT_EQ(p.expert_capacity_factor, 0.f);
  EXPECT_EQ(p.load_window, 0);
  EXPECT_EQ(p.load_limit, 2.f);
  p.n_threads = 2;
  p.n_ctx = 256;
  p.expert_capacity_factor = 1.f;
  p.load_window = 8;
  p.load_limit = 1.f;
  moe_engine* e = nullptr;
  ASSERT_EQ(moe_engine_create(model_, &p, &e), MOE_OK) << moe_last_error();
  moe_request_id id = 0;
  ASSERT_EQ(Submit(e, kPrompts[4], 4, nullptr, &id), MOE_OK);
  moe_request_result* r = nullptr;
  ASSERT_EQ(moe_engine_wait(e, id, -1, &r), MOE_OK) << moe_last_error();
  moe_request_stats rs = moe_default_request_stats();
  ASSERT_EQ(moe_request_result_get_stats(r, &rs), MOE_OK);
  EXPECT_GT(rs.decode_weight_bytes_per_token, 0);
  EXPECT_GT(rs.decode_multiply_adds_per_token, 0);
  EXPECT_GT(rs.multiply_adds, rs.decode_multiply_adds_per_token);
  EXPECT_GT(rs.weight_bytes, 0);
  moe_request_result_free(r);
  moe_engine_stats st;
  ASSERT_EQ(moe_engine_stats_init(&st, sizeof(st)), MOE_OK);
  ASSERT_EQ(moe_engine_get_stats(e, &st), MOE_OK);
  EXPECT_GT(st.rerouted_choices, 0);
  EXPECT_GT(st.reweighted_choices, 0);
  // Switched-off experts: accepted for a MoE layer, refused for a bad layer, id or set.
  const int32_t off[] = {0, 1, 2};
  EXPECT_EQ(moe_engine_disable_experts(e, 0, off, 3), MOE_OK) << moe_last_error();
  ASSERT_EQ(Submit(e, kPrompts[1], 3, nullptr, &id), MOE_OK);
  ASSERT_EQ(moe_engine_wait(e, id, -1, &r), MOE_OK) << moe_last_error();
  moe_request_result_free(r);
  EXPECT_EQ(moe_engine_disable_experts(e, 0, nullptr, 0), MOE_OK);
  EXPECT_EQ(moe_engine_disable_experts(e, 99, off, 3), MOE_ERROR_INVALID_ARGUMENT);
  const int32_t bad[] = {0, 1000};
  EXPECT_EQ(moe_engine_disable_experts(e, 0, bad, 2), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_disable_experts(e, 0, nullptr, 2), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_disable_experts(nullptr, 0, off, 3), MOE_ERROR_INVALID_ARGUMENT);
  moe_engine_free(e);
  p = moe_engine_default_params();
  p.load_limit = 0.f;
  p.load_window = 4;
  EXPECT_EQ(moe_engine_create(model_, &p, &e), MOE_ERROR_INVALID_ARGUMENT);
  p = moe_engine_default_params();
  p.expert_capacity_factor = INFINITY;
  EXPECT_EQ(moe_engine_create(model_, &p, &e), MOE_ERROR_INVALID_ARGUMENT);
}

// The engine's metrics text follows the caller-buffer rules and is Prometheus exposition as the
// Prometheus client library's parser reads it, its counters counting the finished requests.
TEST_F(CApiEngineTest, MetricsTextIsPrometheusExposition) {
  size_t n = 0;
  EXPECT_EQ(moe_engine_metrics_text(nullptr, nullptr, 0, &n), MOE_ERROR_INVALID_ARGUMENT);
  moe_engine* e = NewEngine();
  ASSERT_NE(e, nullptr);
  moe_request_id id = 0;
  ASSERT_EQ(Submit(e, kPrompts[0], 4, nullptr, &id), MOE_OK);
  moe_request_result* r = nullptr;
  ASSERT_EQ(moe_engine_wait(e, id, -1, &r), MOE_OK);
  moe_request_result_free(r);
  ASSERT_EQ(moe_engine_metrics_text(e, nullptr, 0, &n), MOE_ERROR_BUFFER_TOO_SMALL);
  std::string text(n + 1, 'x');
  ASSERT_EQ(moe_engine_metrics_text(e, text.data(), text.size(), &n), MOE_OK);
  EXPECT_EQ(text[n], '\0');
  text.resize(n);
  EXPECT_NE(text.find("moe_engine_requests_finished_total 1\n"), std::string::npos) << text;
  moe_engine_free(e);
  const std::string path =
      ::testing::TempDir() + "engine_metrics_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << text;
  const std::string cmd =
      std::string(MOE_PYTHON3) + " " + MOE_CHECK_METRICS + " " + path + " engine";
  const int status = std::system(cmd.c_str());
  std::remove(path.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "the Prometheus client's parser is not installed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << cmd << "\n" << text;
}

TEST_F(CApiEngineTest, CallerDrivenStepsTryWaitAndTimeouts) {
  moe_engine* e = NewEngine(/*own_thread=*/0);
  ASSERT_NE(e, nullptr);
  Stream s;
  moe_request_id id = 0;
  ASSERT_EQ(Submit(e, kPrompts[2], 8, &s, &id), MOE_OK);
  moe_request_result* r = nullptr;
  EXPECT_EQ(moe_engine_try_wait(e, id, &r), MOE_ERROR_NOT_READY);
  EXPECT_EQ(moe_engine_wait(e, id, 0.01, &r), MOE_ERROR_TIMEOUT);
  EXPECT_EQ(r, nullptr);
  int32_t worked = 1;
  int steps = 0;
  while (worked) {
    ASSERT_EQ(moe_engine_step(e, &worked), MOE_OK) << moe_last_error();
    ++steps;
  }
  EXPECT_GT(steps, 8);
  ASSERT_EQ(moe_engine_try_wait(e, id, &r), MOE_OK);
  EXPECT_EQ(std::string(moe_request_result_text(r)), Lone(kPrompts[2], 8));
  moe_request_result_free(r);
  moe_engine_free(e);
}

TEST_F(CApiEngineTest, CancelAndACallbackStopEndOnlyTheirRequest) {
  moe_engine* e = NewEngine(/*own_thread=*/0);
  ASSERT_NE(e, nullptr);
  Stream a, b, c;
  b.stop_after = 2;
  moe_request_id ia, ib, ic;
  ASSERT_EQ(Submit(e, kPrompts[0], 200, &a, &ia), MOE_OK);
  ASSERT_EQ(Submit(e, kPrompts[1], 200, &b, &ib), MOE_OK);
  ASSERT_EQ(Submit(e, kPrompts[3], 6, &c, &ic), MOE_OK);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(moe_engine_step(e, nullptr), MOE_OK);
  ASSERT_EQ(moe_engine_cancel(e, ia), MOE_OK);
  int32_t worked = 1;
  while (worked) ASSERT_EQ(moe_engine_step(e, &worked), MOE_OK);
  moe_request_result* r = nullptr;
  ASSERT_EQ(moe_engine_wait(e, ia, -1, &r), MOE_OK);
  moe_request_stats st = moe_default_request_stats();
  ASSERT_EQ(moe_request_result_get_stats(r, &st), MOE_OK);
  EXPECT_EQ(st.finish_reason, MOE_FINISH_CANCELLED);
  EXPECT_EQ(st.status, MOE_ERROR_CANCELLED);
  EXPECT_STRNE(moe_request_result_message(r), "");
  moe_request_result_free(r);
  EXPECT_EQ(a.finish, MOE_FINISH_CANCELLED);
  EXPECT_EQ(b.finish, MOE_FINISH_CALLBACK);
  EXPECT_EQ(b.tokens, 2);
  ASSERT_EQ(moe_engine_wait(e, ic, -1, &r), MOE_OK);
  EXPECT_EQ(std::string(moe_request_result_text(r)), Lone(kPrompts[3], 6));
  moe_request_result_free(r);
  EXPECT_EQ(moe_engine_cancel(e, ia), MOE_OK) << "cancelling a finished request";
  EXPECT_EQ(moe_engine_cancel(e, 999), MOE_ERROR_NOT_FOUND);
  moe_engine_free(e);
}

TEST_F(CApiEngineTest, FreeingWakesWaitersWithCancelledResults) {
  moe_engine* e = NewEngine();
  ASSERT_NE(e, nullptr);
  moe_request_id id = 0;
  ASSERT_EQ(Submit(e, kPrompts[4], 100000, nullptr, &id), MOE_OK);  // until the context is full
  std::atomic<int32_t> waited{-1};
  std::atomic<int32_t> finish{-1};
  std::thread waiter([&] {
    moe_request_result* r = nullptr;
    waited = moe_engine_wait(e, id, -1, &r);
    if (r != nullptr) {
      moe_request_stats st = moe_default_request_stats();
      moe_request_result_get_stats(r, &st);
      finish = st.finish_reason;
      moe_request_result_free(r);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  moe_engine_free(e);
  waiter.join();
  EXPECT_EQ(waited.load(), MOE_OK);
  EXPECT_TRUE(finish == MOE_FINISH_CANCELLED || finish == MOE_FINISH_CONTEXT_FULL) << finish;
}

struct FromCallback {
  moe_engine* engine = nullptr;
  moe_request_id self = 0;
  moe_status wait = MOE_OK, step = MOE_OK, submit = MOE_ERROR_INTERNAL;
  bool done = false;
};

int MisuseFromCallback(const moe_request_event* ev, void* user_data) {
  auto* f = static_cast<FromCallback*>(user_data);
  if (f->done || ev->finish_reason != MOE_FINISH_NONE) return 1;
  f->done = true;
  moe_request_result* r = nullptr;
  f->wait = moe_engine_wait(f->engine, f->self, -1, &r);
  f->step = moe_engine_step(f->engine, nullptr);
  moe_engine_free(f->engine);  // refused: nothing freed
  moe_request_params rp = moe_request_default_params();
  rp.prompt = "more";
  moe_request_id id;
  f->submit = moe_engine_submit(f->engine, &rp, nullptr, nullptr, &id);  // allowed
  return 1;
}

TEST_F(CApiEngineTest, MisuseIsAStatusNeverACrashOrAHang) {
  moe_engine* out = nullptr;
  EXPECT_EQ(moe_engine_create(nullptr, nullptr, &out), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_create(model_, nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  moe_engine_params p = moe_engine_default_params();
  p.kv_type = 7;
  EXPECT_EQ(moe_engine_create(model_, &p, &out), MOE_ERROR_INVALID_ARGUMENT);
  p = moe_engine_default_params();
  p.kv_block_size = 24;
  EXPECT_EQ(moe_engine_create(model_, &p, &out), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("power of two"), std::string::npos);
  p = moe_engine_default_params();
  p.kv_type = MOE_KV_Q8_0;  // the fixture's heads (16 values) are not whole Q8_0 blocks
  EXPECT_EQ(moe_engine_create(model_, &p, &out), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("multiple of 32"), std::string::npos);
  moe_context_params cp = moe_context_default_params();
  cp.kv_type = MOE_KV_Q8_0;
  moe_context* ctx = nullptr;
  EXPECT_EQ(moe_context_create(model_, &cp, &ctx), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  p = moe_engine_default_params();
  p.struct_size = 3;
  EXPECT_EQ(moe_engine_create(model_, &p, &out), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);

  moe_engine* e = NewEngine(/*own_thread=*/0, /*kv_tokens=*/64);
  ASSERT_NE(e, nullptr);
  moe_request_id id = 0;
  EXPECT_EQ(moe_engine_submit(nullptr, nullptr, nullptr, nullptr, &id), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_submit(e, nullptr, nullptr, nullptr, &id), MOE_ERROR_INVALID_ARGUMENT);
  moe_request_params rp = moe_request_default_params();
  EXPECT_EQ(moe_engine_submit(e, &rp, nullptr, nullptr, &id), MOE_ERROR_INVALID_ARGUMENT)
      << "no prompt";
  EXPECT_EQ(moe_engine_submit(e, &rp, nullptr, nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  std::vector<int32_t> big(100, 3);
  rp.tokens = big.data();
  rp.n_tokens = big.size();
  EXPECT_EQ(moe_engine_submit(e, &rp, nullptr, nullptr, &id), MOE_ERROR_CONTEXT_FULL)
      << "past the whole KV cache of 64 positions";
  int32_t bad = 1 << 30;
  rp.tokens = &bad;
  rp.n_tokens = 1;
  EXPECT_EQ(moe_engine_submit(e, &rp, nullptr, nullptr, &id), MOE_ERROR_OUT_OF_RANGE);
  moe_generate_params gp = moe_generate_default_params();
  gp.max_tokens = -2;
  rp = moe_request_default_params();
  rp.prompt = "x";
  rp.generate = &gp;
  EXPECT_EQ(moe_engine_submit(e, &rp, nullptr, nullptr, &id), MOE_ERROR_INVALID_ARGUMENT);
  moe_request_result* r = nullptr;
  EXPECT_EQ(moe_engine_wait(e, 424242, -1, &r), MOE_ERROR_NOT_FOUND);
  EXPECT_EQ(moe_engine_wait(e, 424242, -1, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_try_wait(nullptr, 1, &r), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_cancel(nullptr, 1), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_step(nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_engine_get_stats(e, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_request_result_get_stats(nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(moe_request_result_text(nullptr), "");
  moe_request_result_free(nullptr);
  moe_engine_free(nullptr);

  // From inside a callback: waiting on itself and stepping are refused, freeing is refused,
  // submitting works.
  FromCallback f;
  f.engine = e;
  moe_sampling_params sp = Greedy();
  gp = moe_generate_default_params();
  gp.sampling = &sp;
  gp.max_tokens = 3;
  rp = moe_request_default_params();
  rp.prompt = "Hello";
  rp.generate = &gp;
  ASSERT_EQ(moe_engine_submit(e, &rp, MisuseFromCallback, &f, &f.self), MOE_OK);
  int32_t worked = 1;
  while (worked) ASSERT_EQ(moe_engine_step(e, &worked), MOE_OK);
  EXPECT_TRUE(f.done);
  EXPECT_EQ(f.wait, MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(f.step, MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(f.submit, MOE_OK);
  moe_engine_stats st = moe_default_engine_stats();
  ASSERT_EQ(moe_engine_get_stats(e, &st), MOE_OK);
  EXPECT_EQ(st.submitted, 2);
  EXPECT_EQ(st.finished, 2);
  moe_engine_free(e);

  // An engine with its own thread is not stepped by hand.
  moe_engine* threaded = NewEngine(/*own_thread=*/1);
  EXPECT_EQ(moe_engine_step(threaded, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  moe_engine_free(threaded);
}

}  // namespace
