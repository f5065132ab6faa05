// A session whose experts are spread over a world of ranks (lib/runtime/expert_parallel.h): rank 0
// drives, the others serve, and everything rank 0 sees (every logit, every greedy token, the
// expert counts) is what one process holding every expert sees. Here the ranks are threads over
// the loopback communicator; tests/dist runs the same over MPI processes.
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lib/base/status_macros.h"
#include "lib/dist/loopback_communicator.h"
#include "lib/runtime/batch_engine.h"
#include "lib/runtime/expert_parallel.h"
#include "lib/runtime/session.h"
#include "tests/support/greedy.h"

namespace moe {
namespace {

const std::string kModel =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf";

std::shared_ptr<const Engine> Load(int world, int rank, LoadOptions o = {}) {
  o.expert_world = world;
  o.expert_rank = rank;
  auto e = Engine::Load(kModel, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : nullptr;
}

using testing::Greedy;

// What rank 0 saw.
struct Record {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  std::vector<std::vector<int64_t>> expert_counts;
  int64_t exchange_bytes = 0;
};

// A conversation touching every kind of step: a prompt in several steps, generation, a
// truncation, experts switched off, a reset.
absl::Status Converse(Session& s, Record* r) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back(5 + (i * 37) % 900);
  MOE_RETURN_IF_ERROR(s.Decode(prompt, &r->logits));
  r->expert_counts = s.stats().forward.expert_counts;
  r->exchange_bytes += s.stats().forward.exchange_bytes;
  auto keep = [&](int32_t token, absl::string_view) {
    r->tokens.push_back(token);
    return true;
  };
  MOE_RETURN_IF_ERROR(s.GenerateFromTokens({7, 300, 41}, Greedy(6), keep));
  MOE_RETURN_IF_ERROR(s.Truncate(12));
  MOE_RETURN_IF_ERROR(s.SetDisabledExperts(0, std::vector<int32_t>{0, 1}));
  MOE_RETURN_IF_ERROR(s.GenerateFromTokens({}, Greedy(5), keep));
  MOE_RETURN_IF_ERROR(s.Reset());
  MOE_RETURN_IF_ERROR(s.SetDisabledExperts(0, {}));
  MOE_RETURN_IF_ERROR(s.Decode({9, 8, 7, 6, 5}, &r->logits));
  return absl::OkStatus();
}

SessionOptions Options(const RoutingPolicy& routing) {
  SessionOptions so;
  so.threads = 1;
  so.n_ctx = 64;
  so.n_batch = 8;
  so.routing = routing;
  return so;
}

struct WorldRun {
  Record record;
  absl::Status driver;                // rank 0's conversation
  std::vector<absl::Status> servers;  // ranks 1.. : what ServeExpertParallel returned
};

// Rank 0 runs `drive` on a session over a loopback world of n ranks; the others serve.
template <typename Drive>
WorldRun RunWorld(int n, const SessionOptions& options, Drive drive,
                  std::chrono::milliseconds timeout = std::chrono::seconds(30),
                  ServeOptions serve = {}, const LoadOptions& load = {}) {
  auto world = CreateLoopbackWorld(n, timeout);
  WorldRun run;
  run.servers.resize(n);
  // The serving ranks start waiting for orders once rank 0 has loaded, so that a short idle
  // timeout measures the pause between steps rather than how long rank 0 takes to load (with
  // the dense weights on rank 0 alone it loads more than the others).
  std::latch rank0_ready(1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto engine = Load(n, r, load);
      if (r > 0) {
        rank0_ready.wait();
        if (engine != nullptr) run.servers[r] = ServeExpertParallel(engine, world[r].get(), serve);
        return;
      }
      rank0_ready.count_down();
      if (engine == nullptr) return;
      SessionOptions so = options;
      so.communicator = world[0].get();
      auto session = Session::Create(engine, so);
      run.driver = session.ok() ? drive(**session, &run.record) : session.status();
      session = absl::CancelledError("closed");  // the session goes before the servers stop
      StopExpertParallelServers(world[0].get()).IgnoreError();
    });
  }
  for (auto& t : threads) t.join();
  run.servers.erase(run.servers.begin());
  return run;
}

Record Alone(const SessionOptions& options) {
  auto engine = Engine::Load(kModel, {});
  EXPECT_TRUE(engine.ok()) << engine.status();
  auto session = Session::Create(*engine, options);
  EXPECT_TRUE(session.ok()) << session.status();
  Record r;
  EXPECT_TRUE(Converse(**session, &r).ok());
  return r;
}

TEST(ExpertParallelSessionTest, RankZeroSeesWhatOneProcessSees) {
  RoutingPolicy policies;  // capacity and load-aware re-weighting depend on the whole batch
  policies.capacity_factor = 1.f;
  policies.load_window = 8;
  policies.load_limit = 1.f;
  for (const RoutingPolicy& routing : {RoutingPolicy(), policies}) {
    const SessionOptions options = Options(routing);
    const Record want = Alone(options);
    ASSERT_FALSE(want.tokens.empty());
    // The dense weights on every rank (each runs the whole step), or on rank 0 alone (it sends
    // each MoE layer's inputs; the others run experts only).
    for (bool root_only : {false, true}) {
      LoadOptions load;
      load.dense_on_root_only = root_only;
      for (int n : {2, 3}) {
        SCOPED_TRACE(::testing::Message() << n << " ranks, dense on rank 0 only: " << root_only);
        WorldRun run = RunWorld(n, options, Converse, std::chrono::seconds(30), {}, load);
        ASSERT_TRUE(run.driver.ok()) << run.driver;
        for (const absl::Status& s : run.servers) EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ(run.record.logits, want.logits);
        EXPECT_EQ(run.record.tokens, want.tokens);
        EXPECT_EQ(run.record.expert_counts, want.expert_counts) << "every choice counted once";
        EXPECT_GT(run.record.exchange_bytes, 0);
      }
    }
  }
}

// With the dense weights on rank 0 only, the other ranks hold their experts and nothing else,
// and still account for the whole model.
TEST(ExpertParallelSessionTest, ServingRanksMayHoldTheirExpertsAlone) {
  auto whole = Engine::Load(kModel, {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  LoadOptions load;
  load.dense_on_root_only = true;
  auto root = Load(2, 0, load);
  auto server = Load(2, 1, load);
  ASSERT_NE(root, nullptr);
  ASSERT_NE(server, nullptr);
  const ModelSpec& spec = server->model()->spec();
  int64_t expert_bytes = 0, whole_expert_bytes = 0;
  for (const TensorSpec& t : spec.tensors) {
    EXPECT_GE(t.expert, 0) << t.name << " is not an expert's";
    expert_bytes += t.byte_size();
  }
  for (const TensorSpec& t : (*whole)->model()->spec().tensors) {
    if (t.expert >= 0) whole_expert_bytes += t.byte_size();
  }
  EXPECT_EQ(expert_bytes * 2, whole_expert_bytes) << "half of the experts (round robin)";
  EXPECT_EQ(server->params().held_bytes, expert_bytes);
  EXPECT_EQ(server->params().total_bytes, (*whole)->params().total_bytes);
  EXPECT_EQ(server->params().active_bytes_per_token, (*whole)->params().active_bytes_per_token);
  EXPECT_GT(root->params().held_bytes, (*whole)->params().held_bytes - whole_expert_bytes)
      << "rank 0: the dense weights and its experts";

  auto world = CreateLoopbackWorld(2);
  SessionOptions so = Options({});
  so.communicator = world[0].get();
  EXPECT_EQ(Session::Create(server, so).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a rank holding experts only cannot drive";
}

// Ranks loaded differently (one with the dense weights everywhere, one on rank 0 only) refuse to
// run together, with an error on both sides and no hang.
TEST(ExpertParallelSessionTest, RanksLoadedWithDifferentDensePlacementsRefuse) {
  for (bool root_only_on_rank0 : {false, true}) {
    SCOPED_TRACE(root_only_on_rank0);
    auto world = CreateLoopbackWorld(2, std::chrono::milliseconds(1500));
    absl::Status driven, served;
    std::thread server([&] {
      LoadOptions load;
      load.dense_on_root_only = !root_only_on_rank0;
      auto engine = Load(2, 1, load);
      if (engine != nullptr) served = ServeExpertParallel(engine, world[1].get(), {});
    });
    LoadOptions load;
    load.dense_on_root_only = root_only_on_rank0;
    auto engine = Load(2, 0, load);
    ASSERT_NE(engine, nullptr);
    SessionOptions so = Options({});
    so.communicator = world[0].get();
    auto session = Session::Create(engine, so);
    if (session.ok())
      driven = (*session)->Decode({1, 2, 3});
    else
      driven = session.status();
    session = absl::CancelledError("closed");
    StopExpertParallelServers(world[0].get()).IgnoreError();
    server.join();
    EXPECT_FALSE(driven.ok());
    EXPECT_EQ(served.code(), absl::StatusCode::kFailedPrecondition) << served;
    EXPECT_NE(served.message().find("load every rank alike"), std::string::npos) << served;
  }
}

TEST(ExpertParallelSessionTest, EachRankMayReadItsShareThroughAnExpertCache) {
  const SessionOptions options = Options({});
  const Record want = Alone(options);
  for (bool root_only : {false, true}) {
    SCOPED_TRACE(root_only);
    LoadOptions cached;
    cached.expert_cache_fraction = 0.5;  // half of each rank's own experts fit
    cached.dense_on_root_only = root_only;
    WorldRun run = RunWorld(2, options, Converse, std::chrono::seconds(30), {}, cached);
    ASSERT_TRUE(run.driver.ok()) << run.driver;
    EXPECT_TRUE(run.servers[0].ok()) << run.servers[0];
    EXPECT_EQ(run.record.logits, want.logits);
    EXPECT_EQ(run.record.tokens, want.tokens);
  }
}

class StopServingTest : public ::testing::TestWithParam<bool> {};

TEST_P(StopServingTest, ARankThatStopsServingEndsTheConversationWithAnError) {
  ServeOptions impatient;
  impatient.idle_timeout = std::chrono::milliseconds(500);  // the serving rank gives up
  LoadOptions load;
  load.dense_on_root_only = GetParam();
  std::vector<absl::Status> calls;
  WorldRun run = RunWorld(
      2, Options({}),
      [&](Session& s, Record*) {
        calls.push_back(s.Decode({1, 2, 3}));
        std::this_thread::sleep_for(std::chrono::milliseconds(2000));
        const auto t0 = std::chrono::steady_clock::now();
        calls.push_back(s.Decode({4}));
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4)) << "no hang";
        calls.push_back(s.Decode({5}));
        return absl::OkStatus();
      },
      std::chrono::milliseconds(1500), impatient, load);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_TRUE(calls[0].ok()) << calls[0];
  EXPECT_EQ(calls[1].code(), absl::StatusCode::kDeadlineExceeded) << calls[1];
  EXPECT_EQ(calls[2].code(), absl::StatusCode::kFailedPrecondition) << calls[2];
  EXPECT_NE(calls[2].message().find("out of step"), std::string::npos) << calls[2];
  EXPECT_EQ(run.servers[0].code(), absl::StatusCode::kDeadlineExceeded) << run.servers[0];
}

INSTANTIATE_TEST_SUITE_P(ExpertParallel, StopServingTest, ::testing::Bool(), [](const auto& info) {
  return info.param ? "DenseOnRankZeroOnly" : "DenseOnEveryRank";
});

TEST(ExpertParallelSessionTest, AModelHoldingPartOfTheExpertsNeedsItsWorld) {
  auto part = Load(2, 0);
  ASSERT_NE(part, nullptr);
  auto alone = Session::Create(part, Options({}));
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition) << alone.status();

  auto world = CreateLoopbackWorld(2);
  SessionOptions so = Options({});
  so.communicator = world[1].get();
  EXPECT_EQ(Session::Create(part, so).status().code(), absl::StatusCode::kFailedPrecondition)
      << "rank 1 serves; it does not drive";

  auto whole = Engine::Load(kModel, {});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(ServeExpertParallel(*whole, world[1].get(), {}).code(),
            absl::StatusCode::kFailedPrecondition);
  so.communicator = world[0].get();
  EXPECT_EQ(Session::Create(*whole, so).status().code(), absl::StatusCode::kFailedPrecondition);

  EXPECT_EQ(BatchEngine::Create(part, {}).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a batching engine over a share needs its world (batch_engine_expert_parallel_test)";

  LoadOptions bad;
  bad.expert_world = 2;
  bad.expert_rank = 2;
  EXPECT_EQ(Engine::Load(kModel, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
