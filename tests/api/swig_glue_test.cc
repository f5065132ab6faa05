// The bindings' shared glue (bindings/moe_swig.h) in C++, so that its closing rules run under
// ThreadSanitizer too (a JVM, Mono or Go runtime cannot): closing a context, a model, a
// detokenizer or a batching engine from another thread while a call runs, from the call's own
// callback, and calls on closed handles.
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bindings/moe_swig.h"
#include "gtest/gtest.h"

namespace {

using moe_swig::NativeContext;
using moe_swig::NativeDetokenizer;
using moe_swig::NativeEngine;
using moe_swig::NativeEngineOptions;
using moe_swig::NativeGenerateOptions;
using moe_swig::NativeModel;
using moe_swig::NativeRequestResult;

const std::string kFixture = std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-f32/";

std::vector<int32_t> ReadIds(const std::string& name) {
  std::ifstream f(kFixture + name);
  std::vector<int32_t> ids;
  for (int32_t x; f >> x;) ids.push_back(x);
  return ids;
}

std::unique_ptr<NativeModel> Load() {
  return std::unique_ptr<NativeModel>(
      NativeModel::Load(kFixture + "tiny-qwen2moe-f32.gguf", false, nullptr, 0, 0, 0, true, "",
                        true, 0, MOE_MEMORY_FIT_CACHE_EXPERTS, "", MOE_DEVICE_CPU, 0, 0));
}

// A token sink that signals the first token and slows generation down.
class SlowSink : public moe_swig::TokenSink {
 public:
  bool OnToken(int32_t token, const std::string&) override {
    if (token >= 0) tokens.push_back(token);
    started.store(true);
    if (on_token) on_token();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return true;
  }
  void WaitStarted() const {
    while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<bool> started{false};
  std::vector<int32_t> tokens;
  std::function<void()> on_token;
};

NativeGenerateOptions Greedy(int n) {
  NativeGenerateOptions o;
  o.temperature = 0;
  o.max_tokens = n;
  return o;
}

TEST(SwigGlueTest, CloseFromAnotherThreadCancelsTheRunningCallAndWaits) {
  auto model = Load();
  const std::vector<int32_t> prompt = ReadIds("p1.tokens.txt");
  for (int round = 0; round < 3; ++round) {
    NativeContext ctx(*model, 0, 2, 0, MOE_KV_F32, 0.f, 1, 1.f, 0, 0.f, 0, 0.f, 0, 2.f);
    SlowSink sink;
    int status = 0;
    std::thread generating([&] {
      try {
        ctx.GenerateTokens(prompt.data(), prompt.size(), Greedy(200), &sink);
      } catch (const moe_swig::Error& e) {
        status = e.status();
      }
    });
    sink.WaitStarted();
    // Another thread cancels repeatedly while Close runs: neither may block the other.
    std::atomic<bool> closing{true};
    std::thread canceller([&] {
      while (closing.load()) ctx.Cancel();
    });
    ctx.Close();
    closing.store(false);
    canceller.join();
    generating.join();
    EXPECT_EQ(status, MOE_ERROR_CANCELLED);
    EXPECT_FALSE(ctx.IsOpen());
    try {
      ctx.NPast();
      ADD_FAILURE() << "a closed context answered";
    } catch (const moe_swig::Error& e) {
      EXPECT_EQ(e.status(), moe_swig::kClosedStatus);
    }
  }
}

TEST(SwigGlueTest, CloseFromTheCallbackStopsTheCall) {
  auto model = Load();
  const std::vector<int32_t> prompt = ReadIds("p1.tokens.txt");
  NativeContext ctx(*model, 0, 2, 0, MOE_KV_F32, 0.f, 1, 1.f, 0, 0.f, 0, 0.f, 0, 2.f);
  SlowSink sink;
  sink.on_token = [&] { ctx.Close(); };
  try {
    ctx.GenerateTokens(prompt.data(), prompt.size(), Greedy(50), &sink);
    ADD_FAILURE() << "generation was not stopped";
  } catch (const moe_swig::Error& e) {
    EXPECT_EQ(e.status(), MOE_ERROR_CANCELLED);
  }
  EXPECT_EQ(sink.tokens.size(), 1u);
}

TEST(SwigGlueTest, ClosingTheModelLetsRunningContextsFinish) {
  auto model = Load();
  const std::vector<int32_t> prompt = ReadIds("p1.tokens.txt");
  const std::vector<int32_t> want = ReadIds("p1.gen_tokens.txt");
  NativeContext ctx(*model, 0, 2, 0, MOE_KV_F32, 0.f, 1, 1.f, 0, 0.f, 0, 0.f, 0, 2.f);
  NativeDetokenizer detok(*model);
  SlowSink sink;
  std::thread generating(
      [&] { ctx.GenerateTokens(prompt.data(), prompt.size(), Greedy(want.size()), &sink); });
  sink.WaitStarted();
  model->Close();
  generating.join();
  EXPECT_EQ(sink.tokens, want);
  detok.Push(want[0]);  // still usable after the model closed (throws if not)
  try {
    model->Tokenize("x", false, false);
    ADD_FAILURE() << "a closed model answered";
  } catch (const moe_swig::Error& e) {
    EXPECT_EQ(e.status(), moe_swig::kClosedStatus);
  }
}

TEST(SwigGlueTest, ManyThreadsCloseAndCallAtOnce) {
  auto model = Load();
  const std::vector<int32_t> prompt = ReadIds("p1.tokens.txt");
  NativeContext ctx(*model, 0, 1, 0, MOE_KV_F32, 0.f, 1, 1.f, 0, 0.f, 0, 0.f, 0, 2.f);
  std::vector<std::thread> threads;
  std::atomic<int> calls{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        try {
          ctx.NPast();
          ctx.Stats();
          calls.fetch_add(1);
        } catch (const moe_swig::Error& e) {
          // Busy while another thread's call runs, closed once Close ran: both are fine.
          EXPECT_TRUE(e.status() == MOE_ERROR_BUSY || e.status() == moe_swig::kClosedStatus)
              << e.status() << " " << e.what();
        }
      }
    });
  }
  threads.emplace_back([&] {
    try {
      ctx.GenerateTokens(prompt.data(), prompt.size(), Greedy(8), nullptr);
    } catch (const moe_swig::Error& e) {
      EXPECT_TRUE(e.status() == MOE_ERROR_CANCELLED || e.status() == moe_swig::kClosedStatus ||
                  e.status() == MOE_ERROR_BUSY)
          << e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ctx.Close();
  for (auto& t : threads) t.join();
  EXPECT_FALSE(ctx.IsOpen());
}

// Collects one request's events; can close the engine from its first token.
class RecordingRequestSink : public moe_swig::RequestSink {
 public:
  explicit RecordingRequestSink(NativeEngine* close_on_token = nullptr) : close_(close_on_token) {}
  bool OnToken(int64_t, int32_t, const std::string& piece) override {
    text += piece;
    ++tokens;
    if (close_ != nullptr && tokens == 1) close_->Close();  // from inside the engine's step
    return true;
  }
  void OnFinish(int64_t, const NativeRequestResult& result) override {
    final_text = result.Text();
    finish = result.finish_reason;
    finished.store(true);
  }
  std::string text, final_text;
  int tokens = 0;
  int32_t finish = 0;
  std::atomic<bool> finished{false};

 private:
  NativeEngine* close_;
};

TEST(SwigGlueTest, EngineRequestsFromThreadsAndASinkClosingTheEngine) {
  auto model = Load();
  NativeEngineOptions eo;
  eo.threads = 2;
  eo.n_ctx = 256;
  auto engine = std::make_unique<NativeEngine>(*model, eo);
  std::vector<std::unique_ptr<RecordingRequestSink>> sinks;
  for (int i = 0; i < 6; ++i) sinks.push_back(std::make_unique<RecordingRequestSink>());
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      engine->Submit(i % 2 ? "Hello" : "Once upon a time", Greedy(6 + i), sinks[i].get());
    });
  }
  // A request without a sink is waited for.
  const int64_t waited = engine->Submit("The quick brown fox", Greedy(5), nullptr);
  for (auto& t : threads) t.join();
  NativeRequestResult r = engine->Wait(waited, -1);
  EXPECT_TRUE(r.ready);
  EXPECT_EQ(r.finish_reason, MOE_FINISH_MAX_TOKENS);
  for (auto& s : sinks) {
    while (!s->finished.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(s->text, s->final_text);
    EXPECT_EQ(s->finish, MOE_FINISH_MAX_TOKENS);
  }
  // Closing from inside a sink: the engine finishes closing once the sink returns; everything
  // left ends as cancelled, and the handle refuses calls at once.
  // (The other request goes in first: once the closer has its first token, the engine may be
  // closed before a later Submit.)
  RecordingRequestSink closer(engine.get()), other;
  engine->Submit("Bonjour", Greedy(1000), &other);
  engine->Submit("A", Greedy(1000), &closer);
  while (!closer.finished.load() || !other.finished.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(closer.finish, MOE_FINISH_CANCELLED);
  EXPECT_EQ(other.finish, MOE_FINISH_CANCELLED);
  EXPECT_FALSE(engine->IsOpen());
  EXPECT_THROW(engine->Submit("x", Greedy(1), nullptr), moe_swig::Error);
}

TEST(SwigGlueTest, ClosingTheEngineWakesAWaiter) {
  auto model = Load();
  NativeEngineOptions eo;
  eo.threads = 2;
  eo.n_ctx = 256;
  NativeEngine engine(*model, eo);
  const int64_t id = engine.Submit("What is a mixture of experts?", Greedy(100000), nullptr);
  std::atomic<int> outcome{0};  // 1: a result, 2: closed
  std::thread waiter([&] {
    try {
      NativeRequestResult r = engine.Wait(id, -1);
      outcome = r.ready ? 1 : 3;
    } catch (const moe_swig::Error& e) {
      outcome = e.status() == moe_swig::kClosedStatus ? 2 : 4;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  engine.Close();
  waiter.join();
  EXPECT_TRUE(outcome == 1 || outcome == 2) << outcome;
}

}  // namespace
