// The routing policies that act across tokens: capacity (within a step) and load-aware
// re-weighting (over a sequence's past), through sessions and the batching engine.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/runtime/batch_engine.h"
#include "lib/runtime/session.h"
#include "tests/support/greedy.h"

namespace moe {
namespace {

const std::string kModel =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf";

// A model of each routing function: softmax top-k (qwen2moe), group-limited sigmoid with a
// selection bias behind a dense layer (deepseek2), top-k of biased logits (gpt-oss).
std::vector<std::string> RoutingFunctions() {
  const std::string v2 = std::string(MOE_TESTDATA_DIR) + "/fixtures-v2/";
  return {kModel, v2 + "tiny-deepseek3-f32/tiny-deepseek3-f32.gguf",
          v2 + "tiny-gptoss-f32/tiny-gptoss-f32.gguf"};
}

std::shared_ptr<const Engine> Load(const std::string& path = kModel) {
  auto e = Engine::Load(path, {});
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : nullptr;
}

std::vector<int32_t> Tokens(const Engine& e, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t v = static_cast<int32_t>(e.model()->hp().n_vocab);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(3 + static_cast<int32_t>(rng() % (v - 3)));
  return out;
}

RoutingPolicy LoadAware() {
  RoutingPolicy p;
  p.load_window = 8;
  p.load_limit = 1.f;  // anything above the fair share gives way
  return p;
}

std::unique_ptr<Session> NewSession(std::shared_ptr<const Engine> e, const RoutingPolicy& policy,
                                    int64_t n_batch) {
  SessionOptions so;
  so.threads = 2;
  so.n_ctx = 128;
  so.n_batch = n_batch;
  so.routing = policy;
  auto s = Session::Create(std::move(e), so);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// Every prompt token's logits.
std::vector<float> PromptLogits(Session& s, const std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  EXPECT_TRUE(s.Decode(tokens, &logits).ok());
  return logits;
}

TEST(LoadAwareReweightingTest, ChangesTheWeightsAloneAndNotWithTheStepSize) {
  for (const std::string& path : RoutingFunctions()) {
    SCOPED_TRACE(path);
    auto e = Load(path);
    ASSERT_NE(e, nullptr);
    const auto prompt = Tokens(*e, 40, 1);
    auto off = NewSession(e, {}, 64);
    auto one_by_one = NewSession(e, LoadAware(), 1);
    auto in_steps = NewSession(e, LoadAware(), 16);
    const auto plain = PromptLogits(*off, prompt);
    const auto a = PromptLogits(*one_by_one, prompt);
    const auto b = PromptLogits(*in_steps, prompt);
    EXPECT_EQ(a, b) << "a token sees its own sequence's past however the prompt is split";
    EXPECT_NE(a, plain);
    const Telemetry& t = in_steps->stats().forward;
    EXPECT_GT(t.reweighted_choices, 0);
    // The first mixture layer chooses as the model does (its input is the same; later layers'
    // inputs carry the re-weighted outputs).
    const int first = static_cast<int>(e->model()->hp().n_layer_dense);
    EXPECT_EQ(t.expert_counts[first], off->stats().forward.expert_counts[first]);
    EXPECT_EQ(off->stats().forward.reweighted_choices, 0);
  }
}

// Truncating reads only the kept positions' routing: the continuation is a fresh session's.
TEST(LoadAwareReweightingTest, TruncationContinuesAsIfOnlyTheKeptTokensWereSeen) {
  auto e = Load();
  ASSERT_NE(e, nullptr);
  const auto prompt = Tokens(*e, 30, 2);
  const auto other = Tokens(*e, 12, 3);
  auto s = NewSession(e, LoadAware(), 8);
  PromptLogits(*s, prompt);
  ASSERT_TRUE(s->Truncate(20).ok());
  const auto after = PromptLogits(*s, other);

  auto fresh = NewSession(e, LoadAware(), 8);
  PromptLogits(*fresh, std::vector<int32_t>(prompt.begin(), prompt.begin() + 20));
  EXPECT_EQ(after, PromptLogits(*fresh, other));
}

BatchEngineOptions EngineWith(const RoutingPolicy& policy) {
  BatchEngineOptions o;
  o.threads = 2;
  o.n_ctx = 128;
  o.block_size = 4;
  o.max_step_tokens = 16;
  o.kv_type = DType::kF32;  // as the sessions'
  o.routing = policy;
  return o;
}

using testing::Greedy;

// Submits each prompt for n greedy tokens; the request ids, in order.
std::vector<uint64_t> SubmitAll(BatchEngine& engine,
                                const std::vector<std::vector<int32_t>>& prompts, int64_t n) {
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) {
    RequestOptions r;
    r.tokens = p;
    r.generate = Greedy(n);
    auto id = engine.Submit(r, nullptr);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.ok() ? *id : 0);
  }
  return ids;
}

std::vector<int32_t> LoneGreedy(std::shared_ptr<const Engine> e, const RoutingPolicy& policy,
                                const std::vector<int32_t>& prompt, int64_t n) {
  auto s = NewSession(std::move(e), policy, 64);
  std::vector<int32_t> out;
  EXPECT_TRUE(s->GenerateFromTokens(prompt, Greedy(n), [&](int32_t token, absl::string_view) {
                 if (token >= 0) out.push_back(token);
                 return true;
               }).ok());
  return out;
}

// Each request follows its own past: beside others, and with a prompt that starts like an
// earlier one (whose cached blocks it does not take), it generates what it would alone.
TEST(LoadAwareReweightingTest, EngineRequestsGenerateWhatTheyWouldAlone) {
  auto e = Load();
  ASSERT_NE(e, nullptr);
  const auto shared = Tokens(*e, 12, 4);
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 4; ++i) {
    auto p = shared;
    const auto tail = Tokens(*e, 3 + 5 * i, 10 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  auto engine = BatchEngine::Create(e, EngineWith(LoadAware()));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<uint64_t> ids = SubmitAll(**engine, prompts, 10);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto result = (*engine)->Wait(ids[i]);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->tokens, LoneGreedy(e, LoadAware(), prompts[i], 10)) << "request " << i;
    EXPECT_EQ(result->stats.prefix_tokens_reused, 0);
  }
}

RoutingPolicy Capacity(float factor) {
  RoutingPolicy p;
  p.capacity_factor = factor;
  return p;
}

// A capacity acts on steps of many tokens only: a prompt's steps re-route and report it, a
// token at a time nothing changes.
TEST(CapacityTest, CapsPromptStepsAndLeavesSingleTokensAlone) {
  for (const std::string& path : RoutingFunctions()) {
    SCOPED_TRACE(path);
    auto e = Load(path);
    ASSERT_NE(e, nullptr);
    const auto prompt = Tokens(*e, 48, 5);
    auto off = NewSession(e, {}, 48);
    auto capped = NewSession(e, Capacity(1.f), 48);
    auto capped_single = NewSession(e, Capacity(1.f), 1);
    auto off_single = NewSession(e, {}, 1);
    const auto plain = PromptLogits(*off, prompt);
    EXPECT_NE(PromptLogits(*capped, prompt), plain);
    const Telemetry& t = capped->stats().forward;
    EXPECT_GT(t.rerouted_choices, 0);
    // No expert took more than its capacity, 48 tokens x k / n_expert per layer step, and every
    // choice of every mixture layer ran or was counted as dropped (the last tokens may find room
    // only in experts they already took).
    const HParams& h = e->model()->hp();
    const int64_t cap = (48 * h.n_expert_used + h.n_expert - 1) / h.n_expert;
    int64_t ran = 0;
    for (const auto& layer : t.expert_counts) {
      for (int64_t c : layer) {
        EXPECT_LE(c, cap);
        ran += c;
      }
    }
    EXPECT_EQ(ran + t.dropped_choices, 48 * h.n_expert_used * (h.n_layer - h.n_layer_dense));
    EXPECT_LT(t.dropped_choices, t.rerouted_choices);
    EXPECT_EQ(PromptLogits(*capped_single, prompt), PromptLogits(*off_single, prompt));
    EXPECT_EQ(capped_single->stats().forward.rerouted_choices, 0);
  }
}

TEST(CapacityTest, EngineStepsReportWhatTheyReRouted) {
  auto e = Load();
  ASSERT_NE(e, nullptr);
  auto engine = BatchEngine::Create(e, EngineWith(Capacity(1.f)));
  ASSERT_TRUE(engine.ok()) << engine.status();
  RequestOptions r;
  r.tokens = Tokens(*e, 40, 6);
  r.generate = Greedy(4);
  auto id = (*engine)->Submit(r, nullptr);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE((*engine)->Wait(*id).ok());
  EXPECT_GT((*engine)->stats().rerouted_choices, 0);
}

// An engine's switched-off experts apply to every request from its next step: each generates
// what a lone context with the same experts off does.
TEST(EngineExpertMaskTest, RequestsRouteAroundTheSwitchedOffExperts) {
  auto e = Load();
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> off = {0, 2, 5};
  auto engine = BatchEngine::Create(e, EngineWith({}));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->SetDisabledExperts(1, off).ok());
  std::vector<std::vector<int32_t>> prompts = {Tokens(*e, 9, 21), Tokens(*e, 17, 22)};
  const std::vector<uint64_t> ids = SubmitAll(**engine, prompts, 8);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto result = (*engine)->Wait(ids[i]);
    ASSERT_TRUE(result.ok());
    auto s = NewSession(e, {}, 64);
    ASSERT_TRUE(s->SetDisabledExperts(1, off).ok());
    std::vector<int32_t> want;
    ASSERT_TRUE(s->GenerateFromTokens(prompts[i], Greedy(8), [&](int32_t token, absl::string_view) {
                   if (token >= 0) want.push_back(token);
                   return true;
                 }).ok());
    EXPECT_EQ(result->tokens, want) << "request " << i;
    EXPECT_NE(result->tokens, LoneGreedy(e, {}, prompts[i], 8)) << "the mask changed something";
  }
  const HParams& h = e->model()->hp();
  std::vector<int32_t> all(h.n_expert);
  for (int i = 0; i < h.n_expert; ++i) all[i] = i;
  EXPECT_EQ((*engine)->SetDisabledExperts(0, all).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->SetDisabledExperts(static_cast<int>(h.n_layer), off).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*engine)->SetDisabledExperts(1, {}).ok());
}

TEST(RoutingPoliciesTest, BadValuesAreRefusedAtCreation) {
  auto e = Load();
  ASSERT_NE(e, nullptr);
  SessionOptions so;
  so.routing.capacity_factor = -2.f;
  EXPECT_EQ(Session::Create(e, so).status().code(), absl::StatusCode::kInvalidArgument);
  RoutingPolicy p;
  p.load_window = 4;
  p.load_limit = 0.f;
  EXPECT_EQ(BatchEngine::Create(e, EngineWith(p)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
