// The batching engine over a world of ranks (expert parallelism with the dense weights on rank 0
// alone): its requests get, token for token, what the same engine gives them in one process,
// every expert choice is counted once, and a rank that stops serving ends the requests with an
// error instead of a hang.
#include <chrono>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lib/dist/loopback_communicator.h"
#include "lib/runtime/batch_engine.h"
#include "lib/runtime/expert_parallel.h"
#include "tests/support/greedy.h"

namespace moe {
namespace {

const std::string kModel =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf";

using testing::Greedy;

std::shared_ptr<const Engine> Load(int world = 1, int rank = 0, bool dense_on_root = true) {
  LoadOptions o;
  if (world > 1) {
    o.expert_world = world;
    o.expert_rank = rank;
    o.dense_on_root_only = dense_on_root;
  }
  auto e = Engine::Load(kModel, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : nullptr;
}

std::vector<std::vector<int32_t>> Prompts(int count) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p;
    const int len = 3 + static_cast<int>(rng() % 29);
    for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 900));
    out.push_back(std::move(p));
  }
  return out;
}

BatchEngineOptions Options(const RoutingPolicy& routing = {}) {
  BatchEngineOptions o;
  o.threads = 1;
  o.n_ctx = 128;
  o.block_size = 4;
  o.max_step_tokens = 16;  // prompts go in chunks, beside other requests' decode tokens
  o.own_thread = false;
  o.routing = routing;
  return o;
}

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // per request
  std::vector<RequestResult> results;
  BatchEngineStats stats;
};

// Submits the prompts (the later ones while the first run) and steps until every request ended.
Outcome Serve(BatchEngine& engine, const std::vector<std::vector<int32_t>>& prompts) {
  Outcome out;
  std::vector<uint64_t> ids;
  auto submit = [&](size_t i) {
    RequestOptions r;
    r.tokens = prompts[i];
    r.generate = Greedy(6 + i);
    auto id = engine.Submit(r, nullptr);
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) ids.push_back(*id);
  };
  for (size_t i = 0; i < 3 && i < prompts.size(); ++i) submit(i);
  for (size_t i = 3; i < prompts.size(); ++i) {
    for (int s = 0; s < 2; ++s) EXPECT_TRUE(engine.Step().ok());
    submit(i);
  }
  for (int i = 0; i < 10000; ++i) {
    auto worked = engine.Step();
    EXPECT_TRUE(worked.ok()) << worked.status();
    if (!worked.ok() || (!*worked && engine.stats().running + engine.stats().waiting == 0)) break;
  }
  for (uint64_t id : ids) {
    auto r = engine.Wait(id, 0);
    EXPECT_TRUE(r.ok()) << r.status();
    out.results.push_back(r.ok() ? *r : RequestResult());
    out.tokens.push_back(out.results.back().tokens);
  }
  out.stats = engine.stats();
  return out;
}

// Rank 0 runs `drive` on a batching engine over a loopback world of n ranks, the others serve
// (they start waiting once rank 0 has loaded). Returns what each serving rank's serve returned.
template <typename Drive>
std::vector<absl::Status> OverWorld(int n, const BatchEngineOptions& options, Drive drive,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                    ServeOptions serve = {}) {
  auto world = CreateLoopbackWorld(n, timeout);
  std::vector<absl::Status> served(n);
  std::latch rank0_loaded(1);
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto share = Load(n, r);
      rank0_loaded.wait();
      served[r] = share ? ServeExpertParallel(share, world[r].get(), serve)
                        : absl::InternalError("no share");
    });
  }
  auto share = Load(n, 0);
  rank0_loaded.count_down();
  if (share != nullptr) {
    BatchEngineOptions o = options;
    o.communicator = world[0].get();
    auto engine = BatchEngine::Create(share, o);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (engine.ok()) drive(**engine);
  }
  StopExpertParallelServers(world[0].get()).IgnoreError();
  for (auto& t : threads) t.join();
  served.erase(served.begin());
  return served;
}

TEST(BatchEngineExpertParallelTest, RequestsOverRanksGetWhatOneProcessGivesThem) {
  RoutingPolicy capped;  // a capacity depends on every request of the step
  capped.capacity_factor = 1.f;
  const auto prompts = Prompts(6);
  for (const RoutingPolicy& routing : {RoutingPolicy(), capped}) {
    auto whole = BatchEngine::Create(Load(), Options(routing));
    ASSERT_TRUE(whole.ok()) << whole.status();
    const Outcome want = Serve(**whole, prompts);
    for (const auto& t : want.tokens) ASSERT_FALSE(t.empty());
    for (int n : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << n << " ranks, capacity " << routing.capacity_factor);
      Outcome got;
      const auto served = OverWorld(n, Options(routing),
                                    [&](BatchEngine& engine) { got = Serve(engine, prompts); });
      for (const absl::Status& s : served) EXPECT_TRUE(s.ok()) << s;
      EXPECT_EQ(got.tokens, want.tokens);
      for (const RequestResult& r : got.results) EXPECT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(got.stats.steps, want.stats.steps);
      EXPECT_EQ(got.stats.rerouted_choices, want.stats.rerouted_choices);
      EXPECT_DOUBLE_EQ(got.stats.mean_experts_per_step, want.stats.mean_experts_per_step)
          << "every rank's experts counted once";
      EXPECT_GT(got.stats.exchange_bytes, 0);
      EXPECT_EQ(want.stats.exchange_bytes, 0);
    }
  }
}

TEST(BatchEngineExpertParallelTest, TheEnginesOwnThreadDrivesTheWorld) {
  const auto prompts = Prompts(4);
  std::vector<std::vector<int32_t>> want;
  {
    BatchEngineOptions o = Options();
    o.own_thread = true;
    auto whole = BatchEngine::Create(Load(), o);
    ASSERT_TRUE(whole.ok()) << whole.status();
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      RequestOptions r;
      r.tokens = prompts[i];
      r.generate = Greedy(5);
      ids.push_back(*(*whole)->Submit(r, nullptr));
    }
    for (uint64_t id : ids) want.push_back((*whole)->Wait(id, 60)->tokens);
  }
  BatchEngineOptions o = Options();
  o.own_thread = true;
  std::vector<std::vector<int32_t>> got;
  const auto served = OverWorld(2, o, [&](BatchEngine& engine) {
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      RequestOptions r;
      r.tokens = prompts[i];
      r.generate = Greedy(5);
      auto id = engine.Submit(r, nullptr);
      ASSERT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    for (uint64_t id : ids) {
      auto r = engine.Wait(id, 60);
      ASSERT_TRUE(r.ok()) << r.status();
      got.push_back(r->tokens);
    }
    EXPECT_TRUE(engine.Close().ok());
  });
  EXPECT_TRUE(served[0].ok()) << served[0];
  EXPECT_EQ(got, want);
}

TEST(BatchEngineExpertParallelTest, AServingRankThatStopsEndsRequestsWithAnErrorNotAHang) {
  ServeOptions impatient;
  impatient.idle_timeout = std::chrono::milliseconds(500);  // the serving rank gives up
  const auto prompts = Prompts(3);
  std::vector<RequestResult> results;
  double second_s = 0;
  const auto served = OverWorld(
      2, Options(),
      [&](BatchEngine& engine) {
        auto run = [&](size_t i) {
          RequestOptions r;
          r.tokens = prompts[i];
          r.generate = Greedy(4);
          auto id = engine.Submit(r, nullptr);
          ASSERT_TRUE(id.ok()) << id.status();
          for (int s = 0; s < 1000; ++s) {
            auto worked = engine.Step();
            ASSERT_TRUE(worked.ok()) << worked.status();
            if (!*worked) break;
          }
          auto result = engine.Wait(*id, 0);
          ASSERT_TRUE(result.ok()) << result.status();
          results.push_back(*result);
        };
        run(0);
        std::this_thread::sleep_for(std::chrono::milliseconds(2000));
        const auto t0 = std::chrono::steady_clock::now();
        run(1);
        second_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        run(2);
      },
      std::chrono::milliseconds(1500), impatient);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].status.ok()) << results[0].status;
  EXPECT_EQ(results[0].tokens.size(), 4u);
  EXPECT_EQ(results[1].finish, FinishReason::kError);
  EXPECT_EQ(results[1].status.code(), absl::StatusCode::kDeadlineExceeded) << results[1].status;
  EXPECT_LT(second_s, 4.0) << "no hang";
  EXPECT_EQ(results[2].finish, FinishReason::kError);
  EXPECT_EQ(results[2].status.code(), absl::StatusCode::kFailedPrecondition) << results[2].status;
  EXPECT_NE(results[2].status.message().find("out of step"), std::string::npos);
  EXPECT_EQ(served[0].code(), absl::StatusCode::kDeadlineExceeded) << served[0];
}

TEST(BatchEngineExpertParallelTest, AnEngineOverRanksNeedsItsWorldAndTheDenseWeightsOnRankZero) {
  auto world = CreateLoopbackWorld(2);
  BatchEngineOptions o = Options();
  // A share without its world, or on the wrong rank.
  auto share = Load(2, 0);
  ASSERT_NE(share, nullptr);
  EXPECT_EQ(BatchEngine::Create(share, o).status().code(), absl::StatusCode::kFailedPrecondition);
  o.communicator = world[1].get();
  EXPECT_EQ(BatchEngine::Create(share, o).status().code(), absl::StatusCode::kFailedPrecondition);
  // The dense weights on every rank: the servers would have to mirror the paged cache.
  o.communicator = world[0].get();
  auto everywhere = BatchEngine::Create(Load(2, 0, /*dense_on_root=*/false), o);
  EXPECT_EQ(everywhere.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(everywhere.status().message().find("dense weights on rank 0"), std::string::npos)
      << everywhere.status();
  // A whole model with a world of two.
  EXPECT_EQ(BatchEngine::Create(Load(), o).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace moe
