// The forward pass keeps its activations, scratch and K/V in the backend's memory and touches
// them only through the backend, as a GPU backend needs: every fixture architecture runs on a
// GuardedBackend, whose memory faults when the host reads or writes it between operations, and
// gives the CPU backend's logits bit for bit — single sequences, batched steps over contiguous
// and paged caches, routing observers, experts read through the expert cache, routing kept in the
// backend's memory.
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kv/kv_cache.h"
#include "lib/kv/paged_kv_cache.h"
#include "lib/model/forward.h"
#include "lib/runtime/engine.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/guarded_backend.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::GuardedBackend;

// Logits of a prompt (every row), three single-token steps, then a batched step of two new
// sequences, one wanting every row and one its last; and what a routing observer was told.
struct Outputs {
  std::vector<float> logits;
  std::vector<float> observed;
  SequenceCost cost;  // of the paged step's first sequence
};

// How a run is driven besides its backend.
struct DriveOptions {
  ExpertStore* store = nullptr;
  bool observe = true;  // a routing observer (which keeps routing on the host)
  Telemetry* telemetry = nullptr;
  RoutingPolicy policy;
};

absl::StatusOr<KvCache> CacheFor(const HParams& h, Backend& backend) {
  return KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim, DType::kF16, h.values_in_keys(),
                         {}, backend);
}

Outputs Drive(const std::shared_ptr<const Model>& model, Backend& backend,
              const DriveOptions& o = {}) {
  const HParams& h = model->hp();
  Transformer tf(model, &backend);
  tf.set_expert_store(o.store);
  tf.set_routing_policy(o.policy);
  Outputs run;
  if (o.observe) {
    tf.set_routing_observer(
        [&](int, int64_t rows, int, const int32_t*, const float*, const float* inputs) {
          run.observed.insert(run.observed.end(), inputs, inputs + rows * h.n_embd);
        });
  }
  Telemetry* tel = o.telemetry;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 5) % h.n_vocab));
  auto cache = CacheFor(h, backend);
  EXPECT_TRUE(cache.ok()) << cache.status();
  std::vector<float> out;
  EXPECT_TRUE(tf.Forward({tokens.data(), 9}, *cache, LogitsFor::kAll, &out, tel).ok());
  run.logits = out;
  for (int t = 9; t < 12; ++t) {
    EXPECT_TRUE(tf.Forward({&tokens[t], 1}, *cache, LogitsFor::kLast, &out, tel).ok());
    run.logits.insert(run.logits.end(), out.begin(), out.end());
  }
  auto a = CacheFor(h, backend);
  auto b = CacheFor(h, backend);
  EXPECT_TRUE(a.ok() && b.ok());
  const SequenceChunk chunks[] = {{{tokens.data(), 5}, 0, &*a, LogitsFor::kAll},
                                  {{tokens.data() + 3, 7}, 0, &*b, LogitsFor::kLast}};
  EXPECT_TRUE(tf.ForwardBatch(chunks, &out, tel).ok());
  run.logits.insert(run.logits.end(), out.begin(), out.end());
  // Two sequences in a paged cache (blocks of 4 positions), as the batching engine keeps them.
  PagedKvCacheOptions po;
  po.shape = {h.n_layer, h.n_head_kv, h.head_dim, DType::kF16, 2, h.values_in_keys()};
  po.windows = model->attention_windows();
  po.positions = 128;
  po.max_sequences = 2;
  po.max_step_tokens = 16;
  po.memory = &backend;
  auto paged = PagedKvCache::Create(po);
  EXPECT_TRUE(paged.ok()) << paged.status();
  if (!paged.ok()) return run;
  PagedKvSequence s1 = (*paged)->NewSequence(), s2 = (*paged)->NewSequence();
  EXPECT_TRUE((*paged)->Grow(s1, 0, 6).ok() && (*paged)->Grow(s2, 0, 9).ok());
  SequenceChunk paged_chunks[] = {{{tokens.data() + 1, 6}, 0, &s1, LogitsFor::kAll},
                                  {{tokens.data() + 2, 9}, 0, &s2, LogitsFor::kLast}};
  paged_chunks[0].cost = &run.cost;
  EXPECT_TRUE(tf.ForwardBatch(paged_chunks, &out, tel).ok());
  run.logits.insert(run.logits.end(), out.begin(), out.end());
  (*paged)->Release(s1);
  (*paged)->Release(s2);
  return run;
}

class ForwardBackendMemoryTest : public ::testing::TestWithParam<fs::path> {};

TEST_P(ForwardBackendMemoryTest, RunsOnMemoryTheHostCannotTouch) {
  auto engine = Engine::Load(testing::FixtureGguf(GetParam()), LoadOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto cpu = CreateCpuBackend({2, true});
  const Outputs want = Drive((*engine)->model(), *cpu);
  GuardedBackend guarded(CreateCpuBackend({2, true}));
  const Outputs got = Drive((*engine)->model(), guarded);
  ASSERT_FALSE(want.logits.empty());
  EXPECT_EQ(got.logits, want.logits);
  EXPECT_EQ(got.observed, want.observed);
  EXPECT_GT(guarded.operations(), 0);
}

// Routed experts read from the file into the expert cache (host memory the backend reads as
// weights) run on guarded activations alike.
TEST_P(ForwardBackendMemoryTest, ExpertsFromTheCacheToo) {
  auto resident = Engine::Load(testing::FixtureGguf(GetParam()), LoadOptions{});
  ASSERT_TRUE(resident.ok()) << resident.status();
  LoadOptions o;
  o.expert_cache_fraction = 0.5;
  auto cached = Engine::Load(testing::FixtureGguf(GetParam()), o);
  ASSERT_TRUE(cached.ok()) << cached.status();
  if ((*cached)->expert_store() == nullptr) GTEST_SKIP() << "this model's experts are not cached";
  auto cpu = CreateCpuBackend({2, true});
  const Outputs want = Drive((*resident)->model(), *cpu);
  GuardedBackend guarded(CreateCpuBackend({2, true}));
  const Outputs got = Drive(
      (*cached)->model(), guarded,
      {.store = (*cached)->expert_store(), .observe = true, .telemetry = nullptr, .policy = {}});
  EXPECT_EQ(got.logits, want.logits);
}

// Routing kept in the backend's memory, the path a GPU takes (routes_in_place): the experts are
// routed and run by the ids the backend holds, the choices read back once per step — the host
// path's logits bit for bit, and its telemetry and costs exactly, under the default routing and
// under a policy (temperature, Gumbel noise by position, dynamic top-k).
TEST_P(ForwardBackendMemoryTest, RoutingInPlaceGivesTheHostPathsResults) {
  auto engine = Engine::Load(testing::FixtureGguf(GetParam()), LoadOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  RoutingPolicy noisy;
  noisy.temperature = 1.5f;
  noisy.noise = RouterNoise::kGumbel;
  noisy.noise_scale = 0.5f;
  noisy.noise_seed = 7;
  noisy.confidence = 0.8f;
  for (const RoutingPolicy& policy : {RoutingPolicy{}, noisy}) {
    Telemetry want_tel, got_tel;
    want_tel.record_routing = got_tel.record_routing = true;
    auto cpu = CreateCpuBackend({2, true});
    const Outputs want =
        Drive((*engine)->model(), *cpu,
              {.store = nullptr, .observe = false, .telemetry = &want_tel, .policy = policy});
    GuardedBackend guarded(CreateCpuBackend({2, true}));
    guarded.set_routes_in_place(true);
    const Outputs got =
        Drive((*engine)->model(), guarded,
              {.store = nullptr, .observe = false, .telemetry = &got_tel, .policy = policy});
    EXPECT_GT(guarded.routed_layer_runs(), 0);
    ASSERT_FALSE(want.logits.empty());
    EXPECT_EQ(got.logits, want.logits);
    EXPECT_EQ(got_tel.tokens, want_tel.tokens);
    EXPECT_EQ(got_tel.expert_counts, want_tel.expert_counts);
    EXPECT_EQ(got_tel.weight_bytes_read, want_tel.weight_bytes_read);
    EXPECT_EQ(got_tel.active_params, want_tel.active_params);
    EXPECT_EQ(got_tel.router_entropy_sum, want_tel.router_entropy_sum);
    EXPECT_EQ(got_tel.routing_trace, want_tel.routing_trace);
    EXPECT_EQ(got_tel.active_weight_bytes, want_tel.active_weight_bytes);
    EXPECT_EQ(got_tel.multiply_adds, want_tel.multiply_adds);
    EXPECT_GT(want.cost.weight_bytes, 0);
    EXPECT_EQ(got.cost.weight_bytes, want.cost.weight_bytes);
    EXPECT_EQ(got.cost.multiply_adds, want.cost.multiply_adds);
  }
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, ForwardBackendMemoryTest,
                         ::testing::ValuesIn(testing::FixtureDirs()), testing::FixtureTestName);

// The guard itself: a host write into its memory outside an operation kills the process, inside
// one it lands; and every allocation is given back.
TEST(GuardedBackendTest, FaultsOnAHostTouchBetweenOperations) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto touch = [] {
    GuardedBackend guarded(CreateCpuBackend(1));
    auto p = guarded.Allocate(256);
    if (!p.ok()) return;
    static_cast<float*>(*p)[3] = 1.f;
  };
  EXPECT_DEATH(touch(), "");
  GuardedBackend guarded(CreateCpuBackend(1));
  {
    BackendBuffer<float> buffer;
    auto p = buffer.Resize(guarded, 64);
    ASSERT_TRUE(p.ok());
    const std::vector<float> ones(64, 1.f);
    guarded.CopyFromHost(ones.data(), 64 * sizeof(float), *p);
    guarded.Axpy(2.f, *p, 64, *p);
    std::vector<float> back(64);
    guarded.CopyToHost(*p, 64 * sizeof(float), back.data());
    EXPECT_EQ(back, std::vector<float>(64, 3.f));
    EXPECT_EQ(guarded.live_allocations(), 1u);
  }
  EXPECT_EQ(guarded.live_allocations(), 0u);
}

}  // namespace
}  // namespace moe
