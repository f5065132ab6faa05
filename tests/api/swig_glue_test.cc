// The bindings' shared glue (bindings/moe_swig.h) in C++, so that its closing rules run under
// ThreadSanitizer too (a JVM, Mono or Go runtime cannot): closing a context, a model or a
// detokenizer from another thread while a call runs, from the call's own callback, and calls on
// closed handles.
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
using moe_swig::NativeGenerateOptions;
using moe_swig::NativeModel;

const std::string kFixture = std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-f32/";

std::vector<int32_t> ReadIds(const std::string& name) {
  std::ifstream f(kFixture + name);
  std::vector<int32_t> ids;
  for (int32_t x; f >> x;) ids.push_back(x);
  return ids;
}

std::unique_ptr<NativeModel> Load() {
  return std::unique_ptr<NativeModel>(NativeModel::Load(kFixture + "tiny-qwen2moe-f32.gguf", false,
                                                        nullptr, 0, 0, 0, true, "", true, 0,
                                                        MOE_MEMORY_FIT_CACHE_EXPERTS, ""));
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
    NativeContext ctx(*model, 0, 2, 0, MOE_KV_F32);
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
  NativeContext ctx(*model, 0, 2, 0, MOE_KV_F32);
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
  NativeContext ctx(*model, 0, 2, 0, MOE_KV_F32);
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
  NativeContext ctx(*model, 0, 1, 0, MOE_KV_F32);
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

}  // namespace
