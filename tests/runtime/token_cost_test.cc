// What a token costs (SequenceCost, Telemetry): the weight bytes its computation touched and the
// multiply-adds of its matrix products and attention, per call, per request.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/runtime/batch_engine.h"
#include "lib/runtime/session.h"

namespace moe {
namespace {

const std::string kModel =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-f32/tiny-qwen2moe-f32.gguf";

TEST(TokenCostTest, DecodeTokensCostTheirMatricesExpertsHeadAndTheirAttention) {
  auto e = Engine::Load(kModel, {});
  ASSERT_TRUE(e.ok()) << e.status();
  const HParams& h = (*e)->model()->hp();
  SessionOptions so;
  so.threads = 2;
  so.n_ctx = 64;
  auto s = Session::Create(*e, so);
  ASSERT_TRUE(s.ok());
  std::vector<int64_t> macs, bytes;
  for (int32_t token : {1, 17, 99, 4, 250}) {
    ASSERT_TRUE((*s)->Decode({&token, 1}, nullptr).ok());
    const Telemetry& t = (*s)->stats().forward;
    ASSERT_EQ(t.tokens, 1);
    macs.push_back(t.multiply_adds);
    bytes.push_back(t.active_weight_bytes);
  }
  // One more position seen: per layer and head, one more score and one more weighted value.
  for (size_t i = 1; i < macs.size(); ++i) {
    EXPECT_EQ(macs[i] - macs[i - 1], h.n_layer * h.n_head * 2 * h.head_dim);
    EXPECT_EQ(bytes[i], bytes[0]) << "experts of one size: every token reads as much";
  }
  // The bytes are the model's active bytes per token (which count the norms and biases too).
  const ParamCounts& p = (*e)->params();
  int64_t vectors = 0;
  for (const TensorSpec& ts : (*e)->model()->spec().tensors) {
    if (ts.shape.size() == 1) vectors += static_cast<int64_t>(ts.byte_size());
  }
  EXPECT_LE(bytes[0], p.active_bytes_per_token);
  EXPECT_GE(bytes[0], p.active_bytes_per_token - vectors);
  // A prompt's tokens skip the head but the last: cheaper per token than decoding.
  std::vector<int32_t> prompt = {1, 17, 99, 4, 250, 31, 8, 77};
  ASSERT_TRUE((*s)->Reset().ok());
  ASSERT_TRUE((*s)->Decode(prompt, nullptr).ok());
  const Telemetry& t = (*s)->stats().forward;
  EXPECT_LT(t.active_weight_bytes, static_cast<int64_t>(prompt.size()) * bytes[0]);
  EXPECT_GT(t.multiply_adds, 0);
}

TEST(TokenCostTest, EachRequestCountsItsOwnTokens) {
  auto e = Engine::Load(kModel, {});
  ASSERT_TRUE(e.ok());
  BatchEngineOptions o;
  o.threads = 2;
  o.n_ctx = 128;
  auto engine = BatchEngine::Create(*e, o);
  ASSERT_TRUE(engine.ok());
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_tokens = 6;
  g.stop_at_eog = false;
  std::vector<uint64_t> ids;
  for (int len : {4, 20}) {
    RequestOptions r;
    for (int i = 0; i < len; ++i) r.tokens.push_back(3 + 11 * i);
    r.generate = g;
    auto id = (*engine)->Submit(r, nullptr);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  auto short_one = (*engine)->Wait(ids[0]);
  auto long_one = (*engine)->Wait(ids[1]);
  ASSERT_TRUE(short_one.ok() && long_one.ok());
  const RequestStats& a = short_one->stats;
  const RequestStats& b = long_one->stats;
  EXPECT_GT(a.decode_weight_bytes_per_token, 0);
  EXPECT_EQ(a.decode_weight_bytes_per_token, b.decode_weight_bytes_per_token);
  // The longer prompt's decode steps attend to more positions.
  EXPECT_GT(b.decode_multiply_adds_per_token, a.decode_multiply_adds_per_token);
  EXPECT_GT(b.multiply_adds, a.multiply_adds);
  EXPECT_GT(b.weight_bytes, a.weight_bytes);
}

}  // namespace
}  // namespace moe
