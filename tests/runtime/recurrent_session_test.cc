// A session over a model with recurrent layers (Granite-4.0-H's Mamba-2; LFM2's short
// convolutions, which carry only their kernel's last rows): their state has taken in every token,
// so whatever takes the context back to an earlier position — a truncation, the last token computed
// again for its logits, a step cancelled half way through its layers — computes the kept tokens
// again, and the session goes on exactly as one that never went back.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/runtime/session.h"
#include "tests/support/random_engine.h"

namespace moe {
namespace {

std::shared_ptr<const Engine> GraniteHybrid() {
  testing::RandomModelOptions m;
  m.arch = Arch::kGraniteHybrid;
  m.n_layer = 3, m.ssm_layers = {0, 2}, m.n_ff_shared = 40, m.seed = 37;
  return testing::RandomEngine(m);
}

std::shared_ptr<const Engine> Lfm2() {
  testing::RandomModelOptions m;
  m.arch = Arch::kLfm2Moe;
  m.n_layer = 3, m.short_conv_layers = {0, 2}, m.selection_bias = true, m.seed = 43;
  return testing::RandomEngine(m);
}

std::vector<int32_t> Tokens(int n, uint32_t seed, int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    t.push_back(3 + static_cast<int32_t>((seed >> 8) % (n_vocab - 3)));
  }
  return t;
}

SessionOptions Options() {
  SessionOptions o;
  o.n_ctx = 128;
  o.threads = 2;
  o.n_batch = 4;
  return o;
}

std::vector<int32_t> Continue(Session& s, absl::Span<const int32_t> prompt,
                              float temperature = 0.8f) {
  GenerateOptions g;
  g.sampling.temperature = temperature;
  g.max_tokens = 8;
  g.stop_at_eog = false;
  std::vector<int32_t> out;
  const absl::Status st = s.GenerateFromTokens(prompt, g, [&](int32_t t, absl::string_view) {
    if (t >= 0) out.push_back(t);
    return true;
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Cut back to n_keep (or not at all), then continued from the last kept token's logits: the
// tokens of a session that decoded only the kept tokens, the last one as its prompt.
void ExpectTruncationComputesTheKeptTokensAgain(std::shared_ptr<const Engine> engine) {
  const std::vector<int32_t> ids = Tokens(30, 7, engine->model()->hp().n_vocab);
  for (int64_t n_keep : {30, 29, 17, 4}) {
    SCOPED_TRACE("keep " + std::to_string(n_keep));
    auto cut = Session::Create(engine, Options());
    auto fresh = Session::Create(engine, Options());
    ASSERT_TRUE(cut.ok() && fresh.ok());
    ASSERT_TRUE((*cut)->Decode(ids).ok());
    ASSERT_TRUE((*cut)->Truncate(n_keep).ok());
    const auto kept = absl::MakeConstSpan(ids).subspan(0, n_keep);
    ASSERT_TRUE((*fresh)->Decode(kept.subspan(0, n_keep - 1)).ok());
    const std::vector<int32_t> want = Continue(**fresh, kept.subspan(n_keep - 1));
    EXPECT_EQ(want.size(), 8u);
    EXPECT_EQ(Continue(**cut, {}), want);
  }
}

TEST(RecurrentSessionTest, TruncatingComputesTheKeptTokensAgain) {
  for (auto engine : {GraniteHybrid(), Lfm2()}) {
    ASSERT_NE(engine, nullptr);
    ExpectTruncationComputesTheKeptTokensAgain(engine);
  }
}

// The end of a prompt keeps a checkpoint of the carried state: going back to it computes
// nothing, going back past it only the tokens after it, and the reply generated again is the one
// a session that never went back gives.
TEST(RecurrentSessionTest, GoingBackStartsFromThePromptsCheckpoint) {
  constexpr float kGreedy = 0.f;
  for (auto engine : {GraniteHybrid(), Lfm2()}) {
    ASSERT_NE(engine, nullptr);
    const std::vector<int32_t> ids = Tokens(24, 5, engine->model()->hp().n_vocab);
    auto s = Session::Create(engine, Options());
    auto fresh = Session::Create(engine, Options());
    ASSERT_TRUE(s.ok() && fresh.ok());
    ASSERT_TRUE((*s)->Decode(ids).ok());
    const std::vector<int32_t> reply = Continue(**s, {}, kGreedy);
    ASSERT_EQ((*s)->history().size(), ids.size() + reply.size());
    const int64_t computed = (*s)->stats().prompt_tokens;
    ASSERT_TRUE((*s)->Truncate(24).ok());
    EXPECT_EQ((*s)->stats().prompt_tokens, computed) << "back to the checkpoint: nothing computed";
    EXPECT_EQ(Continue(**s, {}, kGreedy), reply);
    ASSERT_TRUE((*s)->Truncate(27).ok());
    EXPECT_EQ((*s)->stats().prompt_tokens, 3) << "past it: only the 3 tokens after it";
    std::vector<int32_t> kept = ids;
    kept.insert(kept.end(), reply.begin(), reply.begin() + 3);
    ASSERT_TRUE((*fresh)->Decode(kept).ok());
    EXPECT_EQ(Continue(**s, {}, kGreedy), Continue(**fresh, {}, kGreedy));
  }
}

// A step cancelled after its first layer (a Mamba-2 layer, whose state took the step's tokens
// in) fails; the next call computes the context again and goes on as if nothing had happened.
TEST(RecurrentSessionTest, AStepCancelledHalfWayIsComputedAgain) {
  auto engine = GraniteHybrid();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> ids = Tokens(20, 11, engine->model()->hp().n_vocab);
  auto cancelled = Session::Create(engine, Options());
  auto plain = Session::Create(engine, Options());
  ASSERT_TRUE(cancelled.ok() && plain.ok());
  Session* s = cancelled->get();
  ASSERT_TRUE(s->Decode(absl::MakeConstSpan(ids).subspan(0, 10)).ok());
  // The routing of layer 0 is told during the step: cancel there, before layer 1 runs.
  ASSERT_TRUE(s->SetRoutingCallback([s](int64_t, int layer, absl::Span<const int32_t>,
                                        absl::Span<const float>) {
                 if (layer == 0) s->Cancel();
               }).ok());
  const absl::Status st = s->Decode(absl::MakeConstSpan(ids).subspan(10, 3));
  EXPECT_TRUE(absl::IsCancelled(st)) << st;
  EXPECT_EQ(s->history().size(), 10u);
  ASSERT_TRUE(s->SetRoutingCallback(nullptr).ok());
  ASSERT_TRUE(s->Decode(absl::MakeConstSpan(ids).subspan(10, 9)).ok());
  ASSERT_TRUE((*plain)->Decode(absl::MakeConstSpan(ids).subspan(0, 19)).ok());
  EXPECT_EQ(s->logits(), (*plain)->logits());
  EXPECT_EQ(Continue(*s, absl::MakeConstSpan(ids).subspan(19)),
            Continue(**plain, absl::MakeConstSpan(ids).subspan(19)));
}

}  // namespace
}  // namespace moe
