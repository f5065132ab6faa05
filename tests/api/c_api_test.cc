// The C ABI as an application sees it: this file includes only moe_c.h.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "moe_c.h"

namespace {

const std::string kFixtures = std::string(MOE_TESTDATA_DIR) + "/fixtures/";
const std::string kModel = kFixtures + "tiny-qwen2moe-f32/tiny-qwen2moe-f32.gguf";

std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream f(path);
  std::vector<int32_t> ids;
  for (int32_t x; f >> x;) ids.push_back(x);
  return ids;
}

std::string TempFile(const std::string& name, const std::string& bytes) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("moe_c_api_test_" + std::to_string(::getpid()) + "_" + name))
                         .string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

class CApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &model_), MOE_OK) << moe_last_error();
  }
  static void TearDownTestSuite() {
    moe_model_free(model_);
    model_ = nullptr;
  }
  moe_context* NewContext(int32_t n_ctx = 256, uint64_t seed = 0, int32_t threads = 2) {
    moe_context_params p = moe_context_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = threads;
    p.seed = seed;
    moe_context* ctx = nullptr;
    EXPECT_EQ(moe_context_create(model_, &p, &ctx), MOE_OK) << moe_last_error();
    return ctx;
  }
  static moe_model* model_;
};
moe_model* CApiTest::model_ = nullptr;

// Greedy generation params: gp points at sp, so the pair lives together and is not copied.
struct Greedy {
  explicit Greedy(size_t max_tokens) {
    sp.temperature = 0;
    gp.sampling = &sp;
    gp.max_tokens = static_cast<int32_t>(max_tokens);
  }
  Greedy(const Greedy&) = delete;
  Greedy& operator=(const Greedy&) = delete;
  moe_sampling_params sp = moe_sampling_default_params();
  moe_generate_params gp = moe_generate_default_params();
};

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  int stop_after = -1;
};

int Collect(int32_t token, const char* piece, size_t len, void* user_data) {
  auto* c = static_cast<Collected*>(user_data);
  if (token >= 0) c->tokens.push_back(token);
  c->text.append(piece, len);
  return c->stop_after < 0 || static_cast<int>(c->tokens.size()) < c->stop_after;
}

TEST(CApiVersionTest, RuntimeMatchesHeader) {
  EXPECT_STREQ(moe_version_string(), MOE_VERSION_STRING);
  EXPECT_EQ(moe_version_number(), MOE_VERSION_NUMBER);
  EXPECT_STREQ(moe_status_string(MOE_OK), "ok");
  EXPECT_STREQ(moe_status_string(MOE_ERROR_CONTEXT_FULL), "context full");
  EXPECT_STREQ(moe_status_string(static_cast<moe_status>(999)), "unknown status");
}

TEST(CApiErrorsTest, NullArgumentsAreErrorsWithMessages) {
  moe_model* m = reinterpret_cast<moe_model*>(0x1);  // must be overwritten with NULL
  EXPECT_EQ(moe_model_load(nullptr, nullptr, &m), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(moe_last_error()).find("path"), std::string::npos);
  EXPECT_EQ(moe_model_load(kModel.c_str(), nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  moe_model_free(nullptr);
  moe_context_free(nullptr);
  moe_detokenizer_free(nullptr);
  moe_model_info info = moe_model_default_info();
  EXPECT_EQ(moe_model_get_info(nullptr, &info), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_model_chat_template(nullptr), nullptr);
  size_t n = 0;
  int32_t tok[4];
  char buf[16];
  EXPECT_EQ(moe_tokenize(nullptr, "a", 1, 0, tok, 4, &n), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_detokenize(nullptr, tok, 1, buf, 16, &n), MOE_ERROR_INVALID_ARGUMENT);
  moe_detokenizer* d = nullptr;
  EXPECT_EQ(moe_detokenizer_create(nullptr, &d), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_detokenizer_push(nullptr, 1, buf, 16, &n), MOE_ERROR_INVALID_ARGUMENT);
  moe_context* c = nullptr;
  EXPECT_EQ(moe_context_create(nullptr, nullptr, &c), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_context_reset(nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_context_truncate(nullptr, 0), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_context_n_past(nullptr), -1);
  EXPECT_EQ(moe_context_n_ctx(nullptr), -1);
  EXPECT_EQ(moe_context_cancel(nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_decode(nullptr, tok, 1), MOE_ERROR_INVALID_ARGUMENT);
  const float* logits;
  int32_t nv;
  EXPECT_EQ(moe_get_logits(nullptr, &logits, &nv), MOE_ERROR_INVALID_ARGUMENT);
  int32_t out;
  EXPECT_EQ(moe_sample(nullptr, nullptr, &out), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_generate(nullptr, "x", nullptr, nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_generate_tokens(nullptr, tok, 1, nullptr, nullptr, nullptr),
            MOE_ERROR_INVALID_ARGUMENT);
  moe_stats st = moe_default_stats();
  EXPECT_EQ(moe_context_get_stats(nullptr, &st), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_context_get_expert_counts(nullptr, nullptr, 0, &n), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_chat_apply_template(nullptr, nullptr, nullptr, 0, 1, buf, 16, &n),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_model_params_init(nullptr, sizeof(moe_model_params)), MOE_ERROR_INVALID_ARGUMENT);
}

TEST(CApiErrorsTest, BadModelFilesSayWhatIsWrong) {
  moe_model* m = nullptr;
  EXPECT_EQ(moe_model_load("/no/such/model.moe", nullptr, &m), MOE_ERROR_NOT_FOUND);
  EXPECT_NE(std::string(moe_last_error()).find("/no/such/model.moe"), std::string::npos);
  std::string bytes = Slurp(kModel);
  std::string truncated = TempFile("truncated.gguf", bytes.substr(0, bytes.size() / 2));
  EXPECT_EQ(moe_model_load(truncated.c_str(), nullptr, &m), MOE_ERROR_CORRUPT_MODEL);
  EXPECT_NE(std::string(moe_last_error()).find("truncated"), std::string::npos) << moe_last_error();
  std::string header_cut = TempFile("header.gguf", bytes.substr(0, 300));
  EXPECT_NE(moe_model_load(header_cut.c_str(), nullptr, &m), MOE_OK);
  std::string corrupt = bytes;
  corrupt[9] = '\x7f';  // tensor count far beyond the file
  std::string corrupt_path = TempFile("corrupt.gguf", corrupt);
  EXPECT_NE(moe_model_load(corrupt_path.c_str(), nullptr, &m), MOE_OK);
  std::string text = TempFile("text.gguf", "just some text, not a model\n");
  EXPECT_EQ(moe_model_load(text.c_str(), nullptr, &m), MOE_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(moe_last_error()).find("not a model file"), std::string::npos);
  std::string empty = TempFile("empty.gguf", "");
  EXPECT_EQ(moe_model_load(empty.c_str(), nullptr, &m), MOE_ERROR_CORRUPT_MODEL);
  std::string magic_cut = TempFile("magic.gguf", "GGU");
  EXPECT_EQ(moe_model_load(magic_cut.c_str(), nullptr, &m), MOE_ERROR_CORRUPT_MODEL);
  EXPECT_EQ(moe_model_load(::testing::TempDir().c_str(), nullptr, &m), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("directory"), std::string::npos);
  EXPECT_EQ(m, nullptr);
  for (auto* p : {&truncated, &header_cut, &corrupt_path, &text, &empty, &magic_cut}) {
    std::remove(p->c_str());
  }
}

TEST(CApiErrorsTest, StructSizeIsChecked) {
  moe_context_params p = moe_context_default_params();
  p.struct_size = 3;
  moe_model* m = nullptr;
  ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &m), MOE_OK);
  moe_context* c = nullptr;
  EXPECT_EQ(moe_context_create(m, &p, &c), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("struct_size"), std::string::npos);
  moe_model_info info;
  info.struct_size = 0;
  EXPECT_EQ(moe_model_get_info(m, &info), MOE_ERROR_INVALID_ARGUMENT);
  moe_model_free(m);
}

struct Progress {
  std::vector<float> seen;
  int cancel_at = -1;
};

int OnProgress(float f, void* user_data) {
  auto* p = static_cast<Progress*>(user_data);
  p->seen.push_back(f);
  return p->cancel_at < 0 || static_cast<int>(p->seen.size()) < p->cancel_at;
}

TEST(CApiModelTest, LoadReportsProgressAndCanBeCancelled) {
  for (int mmap : {1, 0}) {
    Progress prog;
    moe_model_params p = moe_model_default_params();
    p.use_mmap = mmap;
    p.progress_callback = OnProgress;
    p.progress_user_data = &prog;
    moe_model* m = nullptr;
    ASSERT_EQ(moe_model_load(kModel.c_str(), &p, &m), MOE_OK) << moe_last_error();
    ASSERT_GE(prog.seen.size(), 2u);
    EXPECT_EQ(prog.seen.front(), 0.0f);
    EXPECT_EQ(prog.seen.back(), 1.0f);
    for (size_t i = 1; i < prog.seen.size(); ++i) EXPECT_GE(prog.seen[i], prog.seen[i - 1]);
    moe_model_free(m);
    Progress cancel;
    cancel.cancel_at = 2;
    p.progress_user_data = &cancel;
    EXPECT_EQ(moe_model_load(kModel.c_str(), &p, &m), MOE_ERROR_CANCELLED);
    EXPECT_EQ(m, nullptr);
  }
}

TEST_F(CApiTest, InfoDescribesTheModel) {
  moe_model_info info = moe_model_default_info();
  ASSERT_EQ(moe_model_get_info(model_, &info), MOE_OK);
  EXPECT_STREQ(info.architecture, "qwen2moe");
  EXPECT_EQ(info.n_layer, 2);
  EXPECT_EQ(info.n_expert, 16);
  EXPECT_EQ(info.n_expert_used, 4);
  EXPECT_EQ(info.n_vocab, 32256);
  EXPECT_EQ(info.n_ctx_train, 256);
  EXPECT_EQ(info.bos_token, 32013);
  EXPECT_EQ(info.eos_token, 32014);
  EXPECT_EQ(info.has_tokenizer, 1);
  EXPECT_GT(info.n_params_total, info.n_params_active);
  EXPECT_GT(info.n_params_active, 0);
  EXPECT_STREQ(moe_model_chat_template(model_), "");
}

TEST_F(CApiTest, TokenizeMatchesReferenceAndBuffersFollowTheSizeProtocol) {
  std::string prompt = Slurp(kFixtures + "tiny-qwen2moe-f32/p1.prompt.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  size_t n = 0;
  EXPECT_EQ(
      moe_tokenize(model_, prompt.data(), prompt.size(), MOE_TOKENIZE_ADD_BOS, nullptr, 0, &n),
      MOE_ERROR_BUFFER_TOO_SMALL);
  ASSERT_EQ(n, want.size());
  std::vector<int32_t> ids(n);
  ASSERT_EQ(moe_tokenize(model_, prompt.data(), prompt.size(), MOE_TOKENIZE_ADD_BOS, ids.data(),
                         ids.size(), &n),
            MOE_OK);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(moe_tokenize(model_, "x", 1, 0x80, ids.data(), ids.size(), &n),
            MOE_ERROR_INVALID_ARGUMENT);
  // Detokenize without BOS gives the text back.
  size_t len = 0;
  EXPECT_EQ(moe_detokenize(model_, ids.data() + 1, ids.size() - 1, nullptr, 0, &len),
            MOE_ERROR_BUFFER_TOO_SMALL);
  std::string text(len + 1, '\0');
  ASSERT_EQ(moe_detokenize(model_, ids.data() + 1, ids.size() - 1, text.data(), text.size(), &len),
            MOE_OK);
  EXPECT_EQ(text[len], '\0');
  text.resize(len);
  EXPECT_EQ(text, prompt);
  int32_t bad = 1 << 30;
  EXPECT_EQ(moe_detokenize(model_, &bad, 1, text.data(), text.size(), &len),
            MOE_ERROR_OUT_OF_RANGE);
}

TEST_F(CApiTest, StreamingDetokenizerHoldsSplitCharacters) {
  const char* text = "héllo 世界 🎉!";
  size_t n = 0;
  std::vector<int32_t> ids(64);
  ASSERT_EQ(moe_tokenize(model_, text, std::strlen(text), 0, ids.data(), ids.size(), &n), MOE_OK);
  ids.resize(n);
  moe_detokenizer* d = nullptr;
  ASSERT_EQ(moe_detokenizer_create(model_, &d), MOE_OK);
  std::string out;
  for (int32_t id : ids) {
    char buf[64];
    size_t len = 0;
    ASSERT_EQ(moe_detokenizer_push(d, id, buf, sizeof(buf), &len), MOE_OK);
    std::string piece(buf, len);
    // Every piece is complete UTF-8 on its own: no piece ends inside a character.
    if (!piece.empty()) {
      unsigned char last = piece.back();
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "piece ends with a lead byte";
    }
    out += piece;
  }
  EXPECT_EQ(out, text);
  // A buffer too small keeps the token for a retry.
  ASSERT_EQ(moe_tokenize(model_, "abc", 3, 0, ids.data(), 64, &n), MOE_OK);
  size_t len = 0;
  EXPECT_EQ(moe_detokenizer_push(d, ids[0], nullptr, 0, &len), MOE_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(moe_detokenizer_push(d, ids[0] + 1, nullptr, 0, &len), MOE_ERROR_INVALID_ARGUMENT);
  std::string buf(len + 1, '\0');
  EXPECT_EQ(moe_detokenizer_push(d, ids[0], buf.data(), buf.size(), &len), MOE_OK);
  moe_detokenizer_free(d);
}

TEST_F(CApiTest, GreedyGenerationReproducesLlamaCpp) {
  moe_context* ctx = NewContext();
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  Greedy greedy(want.size());
  moe_generate_params& gp = greedy.gp;
  Collected got;
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &gp, Collect, &got), MOE_OK)
      << moe_last_error();
  EXPECT_EQ(got.tokens, want);
  EXPECT_EQ(moe_context_n_past(ctx), static_cast<int32_t>(prompt.size() + want.size()));
  moe_stats st = moe_default_stats();
  ASSERT_EQ(moe_context_get_stats(ctx, &st), MOE_OK);
  EXPECT_EQ(st.prompt_tokens, static_cast<int32_t>(prompt.size()));
  EXPECT_EQ(st.generated_tokens, static_cast<int32_t>(want.size()));
  EXPECT_EQ(st.finish_reason, MOE_FINISH_MAX_TOKENS);
  EXPECT_GT(st.active_fraction, 0.0);
  EXPECT_LT(st.active_fraction, 1.0);
  EXPECT_GT(st.generate_tokens_per_second, 0.0);
  size_t n = 0;
  EXPECT_EQ(moe_context_get_expert_counts(ctx, nullptr, 0, &n), MOE_ERROR_BUFFER_TOO_SMALL);
  ASSERT_EQ(n, 2u * 16u);
  std::vector<int64_t> counts(n);
  ASSERT_EQ(moe_context_get_expert_counts(ctx, counts.data(), n, &n), MOE_OK);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  // Every processed token (prompt + all but the last sampled one... plus it, fed back) picks 4
  // experts in each of 2 layers.
  EXPECT_EQ(total, static_cast<int64_t>(prompt.size() + want.size()) * 4 * 2);
  moe_context_free(ctx);
}

TEST_F(CApiTest, LowLevelDecodeAndSampleAgreeWithGenerate) {
  moe_context* ctx = NewContext();
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p2.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p2.gen_tokens.txt");
  ASSERT_EQ(moe_decode(ctx, prompt.data(), prompt.size()), MOE_OK);
  moe_sampling_params greedy = moe_sampling_default_params();
  greedy.temperature = 0;
  // p2's greedy margins stay above the tolerance for 6 steps (see gen_info.tsv).
  for (int i = 0; i < 6; ++i) {
    const float* logits = nullptr;
    int32_t n_vocab = 0;
    ASSERT_EQ(moe_get_logits(ctx, &logits, &n_vocab), MOE_OK);
    EXPECT_EQ(n_vocab, 32256);
    int32_t tok = -1;
    ASSERT_EQ(moe_sample(ctx, &greedy, &tok), MOE_OK);
    EXPECT_EQ(tok, want[i]) << "step " << i;
    ASSERT_EQ(moe_decode(ctx, &tok, 1), MOE_OK);
  }
  int32_t bad = 40000;
  EXPECT_EQ(moe_decode(ctx, &bad, 1), MOE_ERROR_OUT_OF_RANGE);
  EXPECT_NE(std::string(moe_last_error()).find("40000"), std::string::npos);
  moe_logit_bias bias{1 << 20, 1.0f};
  greedy.logit_bias = &bias;
  greedy.n_logit_bias = 1;
  int32_t tok;
  EXPECT_EQ(moe_sample(ctx, &greedy, &tok), MOE_ERROR_OUT_OF_RANGE);
  moe_context_free(ctx);
}

TEST_F(CApiTest, LogitBiasSteersSampling) {
  moe_context* ctx = NewContext();
  int32_t bos = 32013;
  ASSERT_EQ(moe_decode(ctx, &bos, 1), MOE_OK);
  moe_logit_bias bias{1234, 1000.0f};
  moe_sampling_params sp = moe_sampling_default_params();
  sp.logit_bias = &bias;
  sp.n_logit_bias = 1;
  int32_t tok = -1;
  ASSERT_EQ(moe_sample(ctx, &sp, &tok), MOE_OK);
  EXPECT_EQ(tok, 1234);
  moe_context_free(ctx);
}

TEST_F(CApiTest, SameSeedSameTextDifferentSeedDifferentText) {
  auto run = [&](uint64_t seed) {
    moe_context* ctx = NewContext(256, seed);
    moe_generate_params gp = moe_generate_default_params();
    moe_sampling_params sp = moe_sampling_default_params();
    sp.temperature = 1.5f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    gp.sampling = &sp;
    gp.max_tokens = 24;
    Collected c;
    EXPECT_EQ(moe_generate(ctx, "Once upon a time", &gp, Collect, &c), MOE_OK) << moe_last_error();
    moe_context_free(ctx);
    return c.tokens;
  };
  auto a = run(7), b = run(7), c = run(8);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_NE(a, c);
}

TEST_F(CApiTest, StopStringsAndCallbackStop) {
  moe_context* ctx = NewContext();
  Greedy greedy(12);
  moe_generate_params& gp = greedy.gp;
  Collected full;
  ASSERT_EQ(moe_generate(ctx, "def fib(n):", &gp, Collect, &full), MOE_OK);
  ASSERT_GE(full.text.size(), 6u);
  // Stop at a string from the middle of that text: the output ends just before it.
  std::string stop = full.text.substr(full.text.size() / 2, 3);
  const char* stops[] = {stop.c_str()};
  gp.stop = stops;
  gp.n_stop = 1;
  ASSERT_EQ(moe_context_reset(ctx), MOE_OK);
  Collected cut;
  ASSERT_EQ(moe_generate(ctx, "def fib(n):", &gp, Collect, &cut), MOE_OK);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  moe_stats st = moe_default_stats();
  moe_context_get_stats(ctx, &st);
  EXPECT_EQ(st.finish_reason, MOE_FINISH_STOP_STRING);
  // The callback stops after 3 tokens.
  gp.stop = nullptr;
  gp.n_stop = 0;
  ASSERT_EQ(moe_context_reset(ctx), MOE_OK);
  Collected three;
  three.stop_after = 3;
  ASSERT_EQ(moe_generate(ctx, "def fib(n):", &gp, Collect, &three), MOE_OK);
  EXPECT_EQ(three.tokens.size(), 3u);
  moe_context_get_stats(ctx, &st);
  EXPECT_EQ(st.finish_reason, MOE_FINISH_CALLBACK);
  moe_context_free(ctx);
}

TEST_F(CApiTest, PromptLongerThanTheContextIsRejectedUpFront) {
  moe_context* ctx = NewContext(16);
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "word ";
  EXPECT_EQ(moe_generate(ctx, long_prompt.c_str(), nullptr, nullptr, nullptr),
            MOE_ERROR_CONTEXT_FULL);
  EXPECT_NE(std::string(moe_last_error()).find("context"), std::string::npos);
  EXPECT_EQ(moe_context_n_past(ctx), 0);
  // Still usable.
  moe_generate_params gp = moe_generate_default_params();
  gp.max_tokens = 4;
  EXPECT_EQ(moe_generate(ctx, "hi", &gp, nullptr, nullptr), MOE_OK) << moe_last_error();
  // Generation that fills the context ends with CONTEXT_FULL as its finish reason.
  gp.max_tokens = 100;
  EXPECT_EQ(moe_generate(ctx, "more", &gp, nullptr, nullptr), MOE_OK);
  moe_stats st = moe_default_stats();
  moe_context_get_stats(ctx, &st);
  EXPECT_TRUE(st.finish_reason == MOE_FINISH_CONTEXT_FULL ||
              st.finish_reason == MOE_FINISH_END_OF_GENERATION);
  EXPECT_LE(moe_context_n_past(ctx), 16);
  moe_context_free(ctx);
}

TEST_F(CApiTest, MultiTurnReusesTheCacheAndMatchesAFreshRun) {
  Greedy greedy(5);
  moe_generate_params& gp = greedy.gp;
  moe_context* ctx = NewContext();
  Collected t1, t2;
  ASSERT_EQ(moe_generate(ctx, "The first turn.", &gp, Collect, &t1), MOE_OK);
  int32_t after_first = moe_context_n_past(ctx);
  ASSERT_EQ(moe_generate(ctx, " And the second.", &gp, Collect, &t2), MOE_OK);
  moe_stats st = moe_default_stats();
  moe_context_get_stats(ctx, &st);
  // Only the new turn's tokens were processed as prompt.
  size_t n_second = 0;
  moe_tokenize(model_, " And the second.", 16, 0, nullptr, 0, &n_second);
  EXPECT_EQ(st.prompt_tokens, static_cast<int32_t>(n_second));
  EXPECT_EQ(moe_context_n_past(ctx),
            after_first + static_cast<int32_t>(n_second + t2.tokens.size()));
  // A fresh context fed the whole conversation at once predicts the same second answer.
  std::vector<int32_t> all(512);
  size_t n = 0;
  ASSERT_EQ(
      moe_tokenize(model_, "The first turn.", 15, MOE_TOKENIZE_ADD_BOS, all.data(), all.size(), &n),
      MOE_OK);
  all.resize(n);
  all.insert(all.end(), t1.tokens.begin(), t1.tokens.end());
  std::vector<int32_t> second(n_second);
  moe_tokenize(model_, " And the second.", 16, 0, second.data(), second.size(), &n);
  all.insert(all.end(), second.begin(), second.end());
  moe_context* fresh = NewContext();
  Collected t2b;
  ASSERT_EQ(moe_generate_tokens(fresh, all.data(), all.size(), &gp, Collect, &t2b), MOE_OK);
  EXPECT_EQ(t2b.tokens, t2.tokens);
  // Truncating back to the first turn and regenerating gives the second answer again.
  ASSERT_EQ(moe_context_truncate(ctx, after_first), MOE_OK);
  Collected t2c;
  ASSERT_EQ(moe_generate(ctx, " And the second.", &gp, Collect, &t2c), MOE_OK);
  EXPECT_EQ(t2c.tokens, t2.tokens);
  EXPECT_EQ(moe_context_truncate(ctx, 100000), MOE_ERROR_OUT_OF_RANGE);
  moe_context_free(fresh);
  moe_context_free(ctx);
}

TEST_F(CApiTest, CancelFromAnotherThreadDuringGeneration) {
  moe_context* ctx = NewContext();
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool first_token = false;
    bool cancelled = false;
  } sh;
  auto cb = [](int32_t token, const char*, size_t, void* ud) -> int {
    auto* s = static_cast<Shared*>(ud);
    std::unique_lock<std::mutex> lock(s->mu);
    s->first_token = true;
    s->cv.notify_all();
    s->cv.wait(lock, [&] { return s->cancelled; });
    return 1;
  };
  std::thread canceller([&] {
    std::unique_lock<std::mutex> lock(sh.mu);
    sh.cv.wait(lock, [&] { return sh.first_token; });
    EXPECT_EQ(moe_context_cancel(ctx), MOE_OK);
    sh.cancelled = true;
    sh.cv.notify_all();
  });
  moe_generate_params gp = moe_generate_default_params();
  gp.max_tokens = 200;
  EXPECT_EQ(moe_generate(ctx, "hello", &gp, cb, &sh), MOE_ERROR_CANCELLED);
  canceller.join();
  // The context stays usable.
  gp.max_tokens = 3;
  EXPECT_EQ(moe_generate(ctx, " again", &gp, nullptr, nullptr), MOE_OK) << moe_last_error();
  moe_context_free(ctx);
}

TEST_F(CApiTest, CancelDuringALongPrompt) {
  // A prompt long enough (quadratic attention over 4000 positions) that the cancelling thread
  // is sure to run while it is processed, even on a busy machine; one compute thread.
  const int32_t n = 4000;
  moe_context* ctx = NewContext(4096, 0, /*threads=*/1);
  std::vector<int32_t> prompt(n);
  for (int32_t i = 0; i < n; ++i) prompt[i] = 100 + i % 30000;
  std::atomic<bool> done{false};
  std::thread canceller([&] {
    while (!done.load()) {
      moe_context_cancel(ctx);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  moe_status s = moe_decode(ctx, prompt.data(), prompt.size());
  done = true;
  canceller.join();
  EXPECT_EQ(s, MOE_ERROR_CANCELLED);
  // Whole chunks that completed stay; the context is consistent and usable.
  int32_t kept = moe_context_n_past(ctx);
  EXPECT_LT(kept, n);
  EXPECT_EQ(kept % 64, 0) << "cancellation lands between prompt chunks";
  EXPECT_EQ(moe_decode(ctx, prompt.data() + kept, 8), MOE_OK) << moe_last_error();
  EXPECT_EQ(moe_context_n_past(ctx), kept + 8);
  moe_context_free(ctx);
}

TEST_F(CApiTest, OneContextUsedByTwoThreadsIsBusyNotCorrupt) {
  moe_context* ctx = NewContext();
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool inside = false, checked = false;
  } sh;
  auto cb = [](int32_t, const char*, size_t, void* ud) -> int {
    auto* s = static_cast<Shared*>(ud);
    std::unique_lock<std::mutex> lock(s->mu);
    s->inside = true;
    s->cv.notify_all();
    s->cv.wait(lock, [&] { return s->checked; });
    return 0;
  };
  std::thread other([&] {
    std::unique_lock<std::mutex> lock(sh.mu);
    sh.cv.wait(lock, [&] { return sh.inside; });
    int32_t tok = 5;
    EXPECT_EQ(moe_decode(ctx, &tok, 1), MOE_ERROR_BUSY);
    EXPECT_NE(std::string(moe_last_error()).find("busy"), std::string::npos);
    // Every call on the context takes part, the reading ones too: what they read is what the
    // running call writes.
    int32_t sampled = -7;
    EXPECT_EQ(moe_sample(ctx, nullptr, &sampled), MOE_ERROR_BUSY);
    EXPECT_EQ(sampled, -7);
    const float* logits = nullptr;
    int32_t n_vocab = 0;
    EXPECT_EQ(moe_get_logits(ctx, &logits, &n_vocab), MOE_ERROR_BUSY);
    moe_stats st = moe_default_stats();
    EXPECT_EQ(moe_context_get_stats(ctx, &st), MOE_ERROR_BUSY);
    size_t n = 0;
    EXPECT_EQ(moe_context_get_expert_counts(ctx, nullptr, 0, &n), MOE_ERROR_BUSY);
    EXPECT_EQ(moe_context_reset(ctx), MOE_ERROR_BUSY);
    EXPECT_EQ(moe_context_truncate(ctx, 0), MOE_ERROR_BUSY);
    EXPECT_EQ(moe_generate(ctx, "y", nullptr, nullptr, nullptr), MOE_ERROR_BUSY);
    EXPECT_GT(moe_context_n_past(ctx), 0);  // allowed at any time
    sh.checked = true;
    sh.cv.notify_all();
  });
  EXPECT_EQ(moe_generate(ctx, "x", nullptr, cb, &sh), MOE_OK);
  other.join();
  moe_context_free(ctx);
}

// A callback that holds generation at its first token until the test lets it go on slowly.
struct SlowGeneration {
  std::mutex mu;
  std::condition_variable cv;
  bool first_token = false;
  static int Callback(int32_t, const char*, size_t, void* ud) {
    auto* s = static_cast<SlowGeneration*>(ud);
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->first_token = true;
    }
    s->cv.notify_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return 1;
  }
  void WaitForFirstToken() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return first_token; });
  }
};

TEST_F(CApiTest, FreeFromAnotherThreadCancelsTheRunningCallAndWaits) {
  for (int round = 0; round < 3; ++round) {
    moe_context* ctx = NewContext();
    SlowGeneration slow;
    moe_generate_params gp = moe_generate_default_params();
    gp.max_tokens = 200;
    moe_status result = MOE_OK;
    std::thread generating(
        [&] { result = moe_generate(ctx, "hello", &gp, SlowGeneration::Callback, &slow); });
    slow.WaitForFirstToken();
    moe_context_free(ctx);  // must not free what the running call uses
    generating.join();
    EXPECT_EQ(result, MOE_ERROR_CANCELLED);
  }
}

TEST_F(CApiTest, FreeFromTheContextsOwnCallbackStopsAndFreesOnReturn) {
  moe_context* ctx = NewContext();
  auto cb = [](int32_t, const char*, size_t, void* ud) -> int {
    moe_context_free(static_cast<moe_context*>(ud));
    return 1;
  };
  moe_generate_params gp = moe_generate_default_params();
  gp.max_tokens = 50;
  EXPECT_EQ(moe_generate(ctx, "hello", &gp, cb, ctx), MOE_ERROR_CANCELLED);
  // ctx is gone now; AddressSanitizer (the ASan run of these tests) reports a leak or a
  // use after free if it was not freed exactly once.
}

TEST_F(CApiTest, TheModelMayBeFreedWhileItsContextsRun) {
  moe_model* model = nullptr;
  ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &model), MOE_OK);
  moe_context* ctx = nullptr;
  ASSERT_EQ(moe_context_create(model, nullptr, &ctx), MOE_OK);
  moe_detokenizer* detok = nullptr;
  ASSERT_EQ(moe_detokenizer_create(model, &detok), MOE_OK);
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  Greedy greedy(want.size());
  moe_generate_params& gp = greedy.gp;
  struct Run {
    SlowGeneration slow;
    Collected got;
    static int Callback(int32_t t, const char* p, size_t n, void* ud) {
      auto* r = static_cast<Run*>(ud);
      Collect(t, p, n, &r->got);
      return SlowGeneration::Callback(t, p, n, &r->slow);
    }
  } run;
  moe_status result = MOE_ERROR_INTERNAL;
  std::thread generating([&] {
    result = moe_generate_tokens(ctx, prompt.data(), prompt.size(), &gp, Run::Callback, &run);
  });
  run.slow.WaitForFirstToken();
  moe_model_free(model);
  generating.join();
  EXPECT_EQ(result, MOE_OK) << moe_last_error();
  EXPECT_EQ(run.got.tokens, want);
  char buf[64];
  size_t len = 0;
  EXPECT_EQ(moe_detokenizer_push(detok, want[0], buf, sizeof(buf), &len), MOE_OK);
  moe_detokenizer_free(detok);
  moe_context_free(ctx);
}

// Token ids are used exactly as given: no BOS is added on an empty context, unlike text.
TEST_F(CApiTest, TokenIdsAreUsedExactlyAsGiven) {
  moe_model_info info = moe_model_default_info();
  ASSERT_EQ(moe_model_get_info(model_, &info), MOE_OK);
  ASSERT_GE(info.bos_token, 0);
  Greedy greedy(1);
  moe_generate_params& gp = greedy.gp;
  // The fixture's prompt ids begin with BOS, as llama.cpp tokenized them.
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  ASSERT_EQ(prompt[0], info.bos_token);
  std::vector<int32_t> without_bos(prompt.begin() + 1, prompt.end());
  moe_context* ctx = NewContext();
  ASSERT_EQ(moe_generate_tokens(ctx, without_bos.data(), without_bos.size(), &gp, nullptr, nullptr),
            MOE_OK);
  EXPECT_EQ(moe_context_n_past(ctx), static_cast<int32_t>(without_bos.size() + 1));
  ASSERT_EQ(moe_context_reset(ctx), MOE_OK);
  // With BOS given, the llama.cpp reference continuation.
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  gp.max_tokens = static_cast<int32_t>(want.size());
  Collected got;
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &gp, Collect, &got), MOE_OK);
  EXPECT_EQ(got.tokens, want);
  // Text on an empty context gets BOS first.
  ASSERT_EQ(moe_context_reset(ctx), MOE_OK);
  gp.max_tokens = 1;
  ASSERT_EQ(moe_generate(ctx, "Hello", &gp, nullptr, nullptr), MOE_OK);
  size_t n = 0;
  std::vector<int32_t> hello(16);
  ASSERT_EQ(moe_tokenize(model_, "Hello", 5, 0, hello.data(), hello.size(), &n), MOE_OK);
  EXPECT_EQ(moe_context_n_past(ctx), static_cast<int32_t>(1 + n + 1));
  moe_context_free(ctx);
}

TEST_F(CApiTest, ResetGivesWhatAFreshContextGives) {
  moe_generate_params gp = moe_generate_default_params();
  gp.max_tokens = 24;  // default sampling: temperature 0.8, the seeded random stream matters
  moe_context* fresh = NewContext(256, /*seed=*/11);
  Collected want;
  ASSERT_EQ(moe_generate(fresh, "Once upon a time", &gp, Collect, &want), MOE_OK);
  moe_context_free(fresh);
  moe_context* ctx = NewContext(256, /*seed=*/11);
  Collected first, again;
  ASSERT_EQ(moe_generate(ctx, "Once upon a time", &gp, Collect, &first), MOE_OK);
  EXPECT_EQ(first.tokens, want.tokens);
  int32_t sampled = 0;
  ASSERT_EQ(moe_sample(ctx, nullptr, &sampled), MOE_OK);  // advances the sampler's streams
  ASSERT_EQ(moe_context_reset(ctx), MOE_OK);
  const float* logits = nullptr;
  int32_t n_vocab = 0;
  EXPECT_EQ(moe_get_logits(ctx, &logits, &n_vocab), MOE_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(moe_generate(ctx, "Once upon a time", &gp, Collect, &again), MOE_OK);
  EXPECT_EQ(again.tokens, want.tokens);
  moe_context_free(ctx);
}

TEST_F(CApiTest, AnEmptyPromptAfterTruncationContinuesFromTheLastKeptToken) {
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  Greedy greedy(4);
  moe_generate_params& gp = greedy.gp;
  moe_context* ctx = NewContext();
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &gp, nullptr, nullptr), MOE_OK);
  ASSERT_EQ(moe_context_truncate(ctx, static_cast<int32_t>(prompt.size())), MOE_OK);
  // The same greedy continuation as straight after the prompt.
  gp.max_tokens = static_cast<int32_t>(want.size());
  Collected got;
  ASSERT_EQ(moe_generate_tokens(ctx, nullptr, 0, &gp, Collect, &got), MOE_OK) << moe_last_error();
  EXPECT_EQ(got.tokens, want);
  ASSERT_EQ(moe_context_reset(ctx), MOE_OK);
  EXPECT_EQ(moe_generate_tokens(ctx, nullptr, 0, &gp, nullptr, nullptr),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("empty context"), std::string::npos)
      << moe_last_error();
  moe_context_free(ctx);
}

// Dynamic top-k through the context params: a share of 1 is the model's top-k, token for token;
// a share of 0.5 runs fewer experts (counted per layer), at least min_experts each; values out of
// range are refused, naming the value.
TEST_F(CApiTest, ExpertConfidenceRunsFewerExpertsAndIsChecked) {
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  {
    const moe_context_params d = moe_context_default_params();
    EXPECT_EQ(d.expert_confidence, 0.f);
    EXPECT_EQ(d.min_experts, 1);
    EXPECT_EQ(d.router_temperature, 1.f);
    EXPECT_EQ(d.router_noise, MOE_ROUTER_NOISE_NONE);
  }
  // Greedy tokens of a context made with p, and the expert choices they took in all.
  auto generate_with = [&](const moe_context_params& p, int64_t* chosen) {
    moe_context* ctx = nullptr;
    EXPECT_EQ(moe_context_create(model_, &p, &ctx), MOE_OK) << moe_last_error();
    Greedy greedy(want.size());
    Collected got;
    EXPECT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &greedy.gp, Collect, &got),
              MOE_OK)
        << moe_last_error();
    std::vector<int64_t> counts(2 * 16);
    size_t n = 0;
    EXPECT_EQ(moe_context_get_expert_counts(ctx, counts.data(), counts.size(), &n), MOE_OK);
    *chosen = 0;
    for (int64_t c : counts) *chosen += c;
    moe_context_free(ctx);
    return got.tokens;
  };
  auto run = [&](float confidence, int32_t min_experts, int64_t* chosen) {
    moe_context_params p = moe_context_default_params();
    p.expert_confidence = confidence;
    p.min_experts = min_experts;
    return generate_with(p, chosen);
  };
  const int64_t top_k_total = static_cast<int64_t>(prompt.size() + want.size()) * 4 * 2;
  int64_t chosen = 0;
  EXPECT_EQ(run(1.f, 1, &chosen), want);
  EXPECT_EQ(chosen, top_k_total);
  run(0.5f, 1, &chosen);
  EXPECT_LT(chosen, top_k_total);
  EXPECT_GE(chosen, top_k_total / 4);  // at least one expert per token and layer
  run(0.5f, 4, &chosen);               // the minimum wins: top-k again
  EXPECT_EQ(chosen, top_k_total);
  // Router temperature and noise: a seed gives the same tokens every time, scale 0 is exact, bad
  // values are refused.
  auto noisy = [&](float temperature, int32_t noise, float scale, uint64_t seed) {
    moe_context_params p = moe_context_default_params();
    p.router_temperature = temperature;
    p.router_noise = noise;
    p.router_noise_scale = scale;
    p.router_noise_seed = seed;
    int64_t unused = 0;
    return generate_with(p, &unused);
  };
  EXPECT_EQ(noisy(1.f, MOE_ROUTER_NOISE_GAUSSIAN, 0.f, 5), want);  // scale 0: no noise
  const auto gumbel = noisy(2.f, MOE_ROUTER_NOISE_GUMBEL, 1.f, 5);
  EXPECT_EQ(noisy(2.f, MOE_ROUTER_NOISE_GUMBEL, 1.f, 5), gumbel);
  for (auto [temperature, noise, scale] : {std::tuple<float, int32_t, float>{0.f, 0, 0.f},
                                           {-1.f, 0, 0.f},
                                           {1.f, 7, 1.f},
                                           {1.f, MOE_ROUTER_NOISE_GAUSSIAN, -0.5f}}) {
    moe_context_params bad = moe_context_default_params();
    bad.router_temperature = temperature;
    bad.router_noise = noise;
    bad.router_noise_scale = scale;
    moe_context* ctx = nullptr;
    EXPECT_EQ(moe_context_create(model_, &bad, &ctx), MOE_ERROR_INVALID_ARGUMENT)
        << temperature << " " << noise << " " << scale;
  }
  moe_context_params p = moe_context_default_params();
  moe_context* ctx = nullptr;
  p.expert_confidence = 1.5f;
  EXPECT_EQ(moe_context_create(model_, &p, &ctx), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("1.5"), std::string::npos) << moe_last_error();
  p = moe_context_default_params();
  p.expert_confidence = 0.5f;
  p.min_experts = 0;
  EXPECT_EQ(moe_context_create(model_, &p, &ctx), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
}

// Capacity and load-aware re-weighting through the context params: defaults off; a capacity
// re-routes some of a prompt's choices, re-weighting scales weights but keeps every choice, and
// both are counted in moe_stats; bad values are refused.
TEST_F(CApiTest, CapacityAndLoadAwareReweightingAreCountedAndChecked) {
  const moe_context_params d = moe_context_default_params();
  EXPECT_EQ(d.expert_capacity_factor, 0.f);
  EXPECT_EQ(d.load_window, 0);
  EXPECT_EQ(d.load_limit, 2.f);
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  auto run = [&](const moe_context_params& p, std::vector<int64_t>* counts) {
    moe_context* ctx = nullptr;
    EXPECT_EQ(moe_context_create(model_, &p, &ctx), MOE_OK) << moe_last_error();
    Greedy greedy(4);
    Collected got;
    EXPECT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &greedy.gp, Collect, &got),
              MOE_OK)
        << moe_last_error();
    moe_stats st = moe_default_stats();
    EXPECT_EQ(moe_context_get_stats(ctx, &st), MOE_OK);
    counts->assign(2 * 16, 0);
    size_t n = 0;
    EXPECT_EQ(moe_context_get_expert_counts(ctx, counts->data(), counts->size(), &n), MOE_OK);
    moe_context_free(ctx);
    return st;
  };
  std::vector<int64_t> plain_counts, counts;
  const moe_stats plain = run(d, &plain_counts);
  EXPECT_EQ(plain.rerouted_choices + plain.dropped_choices + plain.reweighted_choices, 0);
  // What a token cost: the weight bytes it touched and its multiply-adds.
  EXPECT_GT(plain.weight_bytes_per_token, 0);
  EXPECT_GT(plain.multiply_adds_per_token, 0);

  moe_context_params p = d;
  p.expert_capacity_factor = 1.f;
  const moe_stats capped = run(p, &counts);
  EXPECT_GT(capped.rerouted_choices, 0);
  EXPECT_EQ(capped.reweighted_choices, 0);

  p = d;
  p.load_window = 8;
  p.load_limit = 1.f;
  const moe_stats reweighted = run(p, &counts);
  EXPECT_GT(reweighted.reweighted_choices, 0);
  EXPECT_EQ(reweighted.rerouted_choices, 0);

  for (auto [factor, window, limit] : {std::tuple<float, int32_t, float>{-1.f, 0, 2.f},
                                       {0.f, -3, 2.f},
                                       {0.f, 8, 0.5f},
                                       {0.f, 8, NAN}}) {
    moe_context_params bad = d;
    bad.expert_capacity_factor = factor;
    bad.load_window = window;
    bad.load_limit = limit;
    moe_context* ctx = nullptr;
    EXPECT_EQ(moe_context_create(model_, &bad, &ctx), MOE_ERROR_INVALID_ARGUMENT)
        << factor << " " << window << " " << limit;
    EXPECT_EQ(ctx, nullptr);
  }
}

struct RoutingSeen {
  std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> experts;  // (position, layer)
  std::vector<int64_t> counts = std::vector<int64_t>(2 * 16, 0);
  bool weights_ok = true;
};

void OnRouting(int32_t position, int32_t layer, const int32_t* experts, const float* weights,
               int32_t n, void* user_data) {
  auto* seen = static_cast<RoutingSeen*>(user_data);
  std::vector<int32_t>& e = seen->experts[{position, layer}];
  e.assign(experts, experts + n);
  for (int32_t j = 0; j < n; ++j) {
    if (experts[j] >= 0) ++seen->counts[layer * 16 + experts[j]];
    if (!(weights[j] > 0.f && weights[j] <= 1.f)) seen->weights_ok = false;
  }
}

// The routing callback tells every processed token's experts per layer: each position once per
// layer, 4 distinct experts, weights in (0, 1], and in sum the call's expert counts.
TEST_F(CApiTest, RoutingCallbackTellsEveryTokensExperts) {
  EXPECT_EQ(moe_context_set_routing_callback(nullptr, OnRouting, nullptr),
            MOE_ERROR_INVALID_ARGUMENT);
  moe_context* ctx = NewContext();
  RoutingSeen seen;
  ASSERT_EQ(moe_context_set_routing_callback(ctx, OnRouting, &seen), MOE_OK);
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  Greedy greedy(5);
  Collected got;
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &greedy.gp, Collect, &got),
            MOE_OK)
      << moe_last_error();
  // Every token fed to the model: the prompt and the generated tokens (the last one too, so
  // that the context can go on).
  const int32_t processed = static_cast<int32_t>(prompt.size() + got.tokens.size());
  EXPECT_EQ(seen.experts.size(), static_cast<size_t>(processed) * 2);
  for (int32_t p = 0; p < processed; ++p) {
    for (int32_t l = 0; l < 2; ++l) {
      auto it = seen.experts.find({p, l});
      ASSERT_NE(it, seen.experts.end()) << "position " << p << " layer " << l;
      std::set<int32_t> distinct(it->second.begin(), it->second.end());
      EXPECT_EQ(distinct.size(), 4u);
      EXPECT_GE(*distinct.begin(), 0);
      EXPECT_LT(*distinct.rbegin(), 16);
    }
  }
  EXPECT_TRUE(seen.weights_ok);
  std::vector<int64_t> counts(2 * 16);
  size_t n = 0;
  ASSERT_EQ(moe_context_get_expert_counts(ctx, counts.data(), counts.size(), &n), MOE_OK);
  EXPECT_EQ(seen.counts, counts);
  // Removed: the next call tells nothing.
  ASSERT_EQ(moe_context_set_routing_callback(ctx, nullptr, nullptr), MOE_OK);
  const size_t before = seen.experts.size();
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), 2, &greedy.gp, Collect, &got), MOE_OK);
  EXPECT_EQ(seen.experts.size(), before);
  moe_context_free(ctx);
}

// The metrics text follows the caller-buffer rules and is valid Prometheus exposition, as the
// Prometheus client library's own parser reads it, with every family and a sample per layer.
TEST_F(CApiTest, MetricsTextIsPrometheusExposition) {
  moe_context* ctx = NewContext();
  size_t n = 0;
  EXPECT_EQ(moe_context_metrics_text(nullptr, nullptr, 0, &n), MOE_ERROR_INVALID_ARGUMENT);
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  Greedy greedy(6);
  Collected got;
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &greedy.gp, Collect, &got),
            MOE_OK);
  ASSERT_EQ(moe_context_metrics_text(ctx, nullptr, 0, &n), MOE_ERROR_BUFFER_TOO_SMALL);
  ASSERT_GT(n, 0u);
  std::string text(n + 1, 'x');
  ASSERT_EQ(moe_context_metrics_text(ctx, text.data(), text.size(), &n), MOE_OK);
  EXPECT_EQ(text[n], '\0');
  text.resize(n);
  EXPECT_NE(text.find("moe_expert_jain_fairness{layer=\"1\"}"), std::string::npos) << text;
  const std::string path = ::testing::TempDir() + "metrics_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << text;
  const std::string cmd = std::string(MOE_PYTHON3) + " " + MOE_CHECK_METRICS + " " + path + " 2 4";
  const int status = std::system(cmd.c_str());
  std::remove(path.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "the Prometheus client's parser is not installed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << cmd << "\n" << text;
  moe_context_free(ctx);
}

// Switched-off experts are never chosen, the layer's others take their place (still 4 a token),
// an empty set switches them back on, a reset keeps the setting, and bad sets are refused.
TEST_F(CApiTest, DisabledExpertsAreNeverChosen) {
  moe_context* ctx = NewContext();
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  auto counts_after_run = [&] {
    Greedy greedy(4);
    Collected got;
    EXPECT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &greedy.gp, Collect, &got),
              MOE_OK)
        << moe_last_error();
    std::vector<int64_t> counts(2 * 16);
    size_t n = 0;
    EXPECT_EQ(moe_context_get_expert_counts(ctx, counts.data(), counts.size(), &n), MOE_OK);
    EXPECT_EQ(moe_context_reset(ctx), MOE_OK);
    return counts;
  };
  const std::vector<int64_t> before = counts_after_run();
  // The layer-0 experts chosen most: switch them off.
  std::vector<int32_t> off;
  for (int32_t e = 0; e < 16; ++e) {
    if (before[e] > 0 && off.size() < 3) off.push_back(e);
  }
  ASSERT_EQ(off.size(), 3u);
  ASSERT_EQ(moe_context_disable_experts(ctx, 0, off.data(), off.size()), MOE_OK);
  const std::vector<int64_t> after = counts_after_run();  // the reset keeps the setting
  int64_t total0 = 0, total0_before = 0;
  for (int32_t e = 0; e < 16; ++e) {
    total0 += after[e];
    total0_before += before[e];
  }
  for (int32_t e : off) EXPECT_EQ(after[e], 0) << "expert " << e;
  EXPECT_EQ(total0, total0_before);  // still 4 experts a token
  // Layer 1 may route differently (its input changed), but still 4 experts a token.
  int64_t total1 = 0, total1_before = 0;
  for (int32_t e = 16; e < 32; ++e) {
    total1 += after[e];
    total1_before += before[e];
  }
  EXPECT_EQ(total1, total1_before);
  ASSERT_EQ(moe_context_disable_experts(ctx, 0, nullptr, 0), MOE_OK);
  EXPECT_EQ(counts_after_run(), before);
  std::vector<int32_t> all(16);
  for (int32_t e = 0; e < 16; ++e) all[e] = e;
  const int32_t bad = 16;
  EXPECT_EQ(moe_context_disable_experts(ctx, 0, all.data(), all.size()),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("none"), std::string::npos) << moe_last_error();
  EXPECT_EQ(moe_context_disable_experts(ctx, 0, &bad, 1), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_context_disable_experts(ctx, 2, off.data(), 1), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_context_disable_experts(ctx, 0, nullptr, 2), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_context_disable_experts(nullptr, 0, off.data(), 1), MOE_ERROR_INVALID_ARGUMENT);
  moe_context_free(ctx);
}

TEST_F(CApiTest, MessagesNameTheValueThatIsWrong) {
  moe_context_params p = moe_context_default_params();
  p.n_threads = 2147483647;
  moe_context* ctx = nullptr;
  EXPECT_EQ(moe_context_create(model_, &p, &ctx), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("n_threads is 2147483647"), std::string::npos)
      << moe_last_error();
  p = moe_context_default_params();
  p.n_ctx = -5;
  EXPECT_EQ(moe_context_create(model_, &p, &ctx), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("n_ctx is -5"), std::string::npos)
      << moe_last_error();
  ctx = NewContext();
  moe_generate_params gp = moe_generate_default_params();
  gp.max_tokens = -1;
  EXPECT_EQ(moe_generate(ctx, "x", &gp, nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("max_tokens is -1"), std::string::npos)
      << moe_last_error();
  moe_context_free(ctx);
}

// The expert cache through the C ABI: the same greedy tokens as llama.cpp with half the experts
// cached from disk, the call's cache statistics, a bad fraction named, and a caller compiled
// against the first header (a smaller struct_size) still served, its new fields at defaults.
TEST(CApiExpertCacheTest, HalfTheExpertsFromDiskGiveTheReferenceTokens) {
  moe_model_params mp = moe_model_default_params();
  mp.expert_cache_fraction = 0.5;
  moe_model* model = nullptr;
  ASSERT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_OK) << moe_last_error();
  moe_context* ctx = nullptr;
  ASSERT_EQ(moe_context_create(model, nullptr, &ctx), MOE_OK);
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  Greedy greedy(want.size());
  moe_generate_params& gp = greedy.gp;
  Collected got;
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &gp, Collect, &got), MOE_OK)
      << moe_last_error();
  EXPECT_EQ(got.tokens, want);
  moe_stats st = moe_default_stats();
  ASSERT_EQ(moe_context_get_stats(ctx, &st), MOE_OK);
  EXPECT_GT(st.expert_cache_misses, 0);
  EXPECT_GT(st.expert_bytes_read, 0);
  moe_context_free(ctx);
  moe_model_free(model);

  mp.expert_cache_fraction = 1.5;
  EXPECT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("expert_cache_fraction is 1.5"), std::string::npos)
      << moe_last_error();

  // An older caller: the struct ends before the expert cache fields (garbage there is ignored).
  moe_model_params old;
  std::memset(&old, 0xFF, sizeof(old));
  const size_t old_size = offsetof(moe_model_params, expert_cache_bytes);
  ASSERT_EQ(moe_model_params_init(&old, old_size), MOE_OK);
  EXPECT_EQ(old.struct_size, old_size);
  old.expert_cache_fraction = 99;  // beyond the old struct: must not be read
  ASSERT_EQ(moe_model_load(kModel.c_str(), &old, &model), MOE_OK) << moe_last_error();
  moe_model_free(model);
  moe_stats old_stats;
  std::memset(&old_stats, 0xEE, sizeof(old_stats));
  ASSERT_EQ(moe_stats_init(&old_stats, offsetof(moe_stats, expert_cache_hits)), MOE_OK);
  const int64_t untouched = old_stats.expert_cache_hits;
  ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &model), MOE_OK);
  ASSERT_EQ(moe_context_create(model, nullptr, &ctx), MOE_OK);
  ASSERT_EQ(moe_context_get_stats(ctx, &old_stats), MOE_OK);
  EXPECT_EQ(old_stats.expert_cache_hits, untouched);  // past the caller's struct: not written
  moe_context_free(ctx);
  moe_model_free(model);
}

// Experts as placed units through the C ABI: a placement file, where each expert is, pinning
// and unpinning, the per-layer statistics of a call, and the errors of each.
TEST(CApiExpertPlacementTest, PlacementPinningAndLayerStatistics) {
  const std::string placement =
      ::testing::TempDir() + "/c_api_placement_" + std::to_string(::getpid()) + ".json";
  std::ofstream(placement) << R"({"layers": {"0": {"resident": [1]}, "1": {"pinned": [0]}}})";
  moe_model_params mp = moe_model_default_params();
  EXPECT_EQ(mp.expert_prefetch, 1);
  EXPECT_EQ(mp.memory_fit, MOE_MEMORY_FIT_CACHE_EXPERTS);
  mp.expert_cache_fraction = 0.5;
  mp.expert_placement_path = placement.c_str();
  moe_model* model = nullptr;
  ASSERT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_OK) << moe_last_error();
  moe_expert_placement p = moe_default_expert_placement();
  ASSERT_EQ(moe_model_get_expert_placement(model, 0, 1, &p), MOE_OK) << moe_last_error();
  EXPECT_EQ(p.tier, MOE_EXPERT_RESIDENT);
  EXPECT_EQ(p.in_memory, 1);
  EXPECT_GT(p.bytes, 0u);
  EXPECT_EQ(std::string(p.weight_types), "F32/F32/F32");
  ASSERT_EQ(moe_model_get_expert_placement(model, 1, 0, &p), MOE_OK);
  EXPECT_EQ(p.tier, MOE_EXPERT_PINNED);
  EXPECT_EQ(p.in_memory, 1);
  ASSERT_EQ(moe_model_get_expert_placement(model, 1, 3, &p), MOE_OK);
  EXPECT_EQ(p.tier, MOE_EXPERT_CACHED);
  EXPECT_EQ(moe_model_get_expert_placement(model, 99, 0, &p), MOE_ERROR_OUT_OF_RANGE);
  EXPECT_NE(std::string(moe_last_error()).find("layer 99"), std::string::npos) << moe_last_error();
  EXPECT_EQ(moe_model_get_expert_placement(nullptr, 0, 0, &p), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_model_get_expert_placement(model, 0, 0, nullptr), MOE_ERROR_INVALID_ARGUMENT);

  ASSERT_EQ(moe_model_pin_expert(model, 1, 3), MOE_OK) << moe_last_error();
  ASSERT_EQ(moe_model_get_expert_placement(model, 1, 3, &p), MOE_OK);
  EXPECT_EQ(p.tier, MOE_EXPERT_PINNED);
  EXPECT_EQ(p.in_memory, 1);
  EXPECT_EQ(moe_model_unpin_expert(model, 0, 1), MOE_ERROR_INVALID_ARGUMENT);  // resident
  EXPECT_EQ(moe_model_pin_expert(model, 0, -1), MOE_ERROR_OUT_OF_RANGE);
  EXPECT_EQ(moe_model_pin_expert(nullptr, 0, 0), MOE_ERROR_INVALID_ARGUMENT);
  // Pinning everything cannot leave room for a step.
  moe_model_info info = moe_model_default_info();
  ASSERT_EQ(moe_model_get_info(model, &info), MOE_OK);
  moe_status last = MOE_OK;
  for (int32_t e = 0; e < info.n_expert && last == MOE_OK; ++e)
    last = moe_model_pin_expert(model, 0, e);
  EXPECT_EQ(last, MOE_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(moe_last_error()).find("kept free for a step"), std::string::npos)
      << moe_last_error();
  for (int32_t e = 0; e < info.n_expert; ++e) {
    if (e != 1) {
      EXPECT_EQ(moe_model_unpin_expert(model, 0, e), MOE_OK) << e;
    }
  }

  moe_context* ctx = nullptr;
  ASSERT_EQ(moe_context_create(model, nullptr, &ctx), MOE_OK);
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  Greedy greedy(want.size());
  Collected got;
  ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &greedy.gp, Collect, &got),
            MOE_OK)
      << moe_last_error();
  EXPECT_EQ(got.tokens, want);
  std::vector<moe_expert_layer_stats> layers(info.n_layer);
  size_t len = 0;
  ASSERT_EQ(moe_context_get_expert_layer_stats(ctx, layers.data(), layers.size(), &len), MOE_OK)
      << moe_last_error();
  ASSERT_EQ(len, static_cast<size_t>(info.n_layer));
  moe_stats st = moe_default_stats();
  ASSERT_EQ(moe_context_get_stats(ctx, &st), MOE_OK);
  int64_t hits = 0, misses = 0, prefetches = 0, predicted = 0;
  for (const moe_expert_layer_stats& l : layers) {
    hits += l.hits;
    misses += l.misses;
    prefetches += l.prefetches;
    predicted += l.predicted;
    EXPECT_GE(l.experts_in_memory, 1);
    EXPECT_LE(l.predicted_right, l.predicted);
  }
  EXPECT_EQ(hits, st.expert_cache_hits);
  EXPECT_EQ(misses, st.expert_cache_misses);
  EXPECT_EQ(prefetches, st.expert_prefetches);
  EXPECT_EQ(predicted, st.expert_predicted);
  EXPECT_GT(st.expert_cache_hits + st.expert_cache_misses, 0);
  EXPECT_EQ(layers[0].predicted, 0);  // nothing guesses the first layer
  EXPECT_EQ(moe_context_get_expert_layer_stats(ctx, layers.data(), 1, &len),
            MOE_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(len, static_cast<size_t>(info.n_layer));
  // The call's routing as a profile, warming another load of the model.
  const std::string profile = placement + ".profile";
  ASSERT_EQ(moe_context_write_routing_profile(ctx, profile.c_str()), MOE_OK) << moe_last_error();
  EXPECT_EQ(moe_context_write_routing_profile(ctx, "/nonexistent/dir/p.json"), MOE_ERROR_IO);
  moe_context_free(ctx);
  moe_model_free(model);
  moe_model_params warm = moe_model_default_params();
  warm.expert_cache_fraction = 0.5;
  warm.expert_warmup_path = profile.c_str();
  ASSERT_EQ(moe_model_load(kModel.c_str(), &warm, &model), MOE_OK) << moe_last_error();
  int in_memory = 0;
  for (int32_t l = 0; l < info.n_layer; ++l) {
    for (int32_t e = 0; e < info.n_expert; ++e) {
      ASSERT_EQ(moe_model_get_expert_placement(model, l, e, &p), MOE_OK);
      in_memory += p.in_memory;
    }
  }
  EXPECT_GT(in_memory, 0);  // warmed before any token
  size_t n_read = 99;
  ASSERT_EQ(moe_model_warmup(model, profile.c_str(), &n_read), MOE_OK) << moe_last_error();
  EXPECT_LE(n_read, static_cast<size_t>(info.n_layer * info.n_expert));
  EXPECT_EQ(moe_model_warmup(model, placement.c_str(), &n_read), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n_read, 0u);
  EXPECT_EQ(moe_model_warmup(model, nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT);
  moe_model_free(model);
  std::remove(profile.c_str());

  // A malformed placement file fails the load, naming it.
  std::ofstream(placement) << R"({"layers": {"0": {"hot": [1]}}})";
  EXPECT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_last_error()).find("unknown tier \"hot\""), std::string::npos)
      << moe_last_error();
  std::remove(placement.c_str());
}

// A model larger than the memory it may take: cached to fit by default, or OUT_OF_MEMORY.
TEST(CApiExpertPlacementTest, AModelLargerThanItsMemoryLimit) {
  moe_model_params mp = moe_model_default_params();
  mp.memory_limit_bytes = 1;
  mp.memory_fit = MOE_MEMORY_FIT_ERROR;
  moe_model* model = nullptr;
  EXPECT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(moe_last_error()).find("MiB"), std::string::npos) << moe_last_error();
  mp.memory_fit = MOE_MEMORY_FIT_CACHE_EXPERTS;
  EXPECT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(moe_last_error()).find("without the routed experts"), std::string::npos)
      << moe_last_error();
  mp.memory_fit = 7;
  EXPECT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_ERROR_INVALID_ARGUMENT);
  // Without the cache every expert is resident, and pinning changes nothing.
  ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &model), MOE_OK);
  moe_expert_placement p = moe_default_expert_placement();
  ASSERT_EQ(moe_model_get_expert_placement(model, 0, 0, &p), MOE_OK);
  EXPECT_EQ(p.tier, MOE_EXPERT_RESIDENT);
  EXPECT_EQ(p.in_memory, 1);
  EXPECT_EQ(moe_model_pin_expert(model, 0, 0), MOE_OK);
  EXPECT_EQ(moe_model_unpin_expert(model, 0, 0), MOE_ERROR_INVALID_ARGUMENT);
  moe_model_free(model);
}

// The device through the C ABI, on a machine without a GPU (on one, these skip: the GPU tests
// run it): CUDA asked for is UNSUPPORTED with the reason, AUTO runs on the CPU and says so, and
// an unknown device is INVALID_ARGUMENT.
TEST(CApiDeviceTest, CudaWithoutADeviceAutoAndBadValues) {
  moe_model_params mp = moe_model_default_params();
  EXPECT_EQ(mp.device, MOE_DEVICE_CPU);
  EXPECT_EQ(mp.gpu_index, 0);
  EXPECT_EQ(mp.gpu_memory_bytes, 0u);
  moe_model* model = nullptr;
  ASSERT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_OK) << moe_last_error();
  moe_model_info info = moe_model_default_info();
  ASSERT_EQ(moe_model_get_info(model, &info), MOE_OK);
  EXPECT_STREQ(info.device, "cpu");
  moe_model_free(model);
  mp.device = MOE_DEVICE_CUDA;
  const moe_status cuda = moe_model_load(kModel.c_str(), &mp, &model);
  if (cuda == MOE_OK) {
    moe_model_free(model);
    GTEST_SKIP() << "a CUDA device is here: the GPU tests run it";
  }
  EXPECT_EQ(cuda, MOE_ERROR_UNSUPPORTED) << moe_last_error();
  EXPECT_NE(std::string(moe_last_error()).find("a CUDA device was asked for"), std::string::npos)
      << moe_last_error();
  EXPECT_EQ(model, nullptr);
  mp.device = MOE_DEVICE_AUTO;
  ASSERT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_OK) << moe_last_error();
  ASSERT_EQ(moe_model_get_info(model, &info), MOE_OK);
  EXPECT_EQ(std::string(info.device).rfind("cpu (", 0), 0u) << info.device;
  moe_model_free(model);
  mp.device = 3;
  EXPECT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_ERROR_INVALID_ARGUMENT);
  mp.device = MOE_DEVICE_AUTO;
  mp.gpu_index = -1;
  EXPECT_EQ(moe_model_load(kModel.c_str(), &mp, &model), MOE_ERROR_INVALID_ARGUMENT);
}

TEST_F(CApiTest, TwoThreadsTwoContextsShareOneModel) {
  std::vector<int32_t> prompt = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.tokens.txt");
  std::vector<int32_t> want = ReadIds(kFixtures + "tiny-qwen2moe-f32/p1.gen_tokens.txt");
  std::vector<int32_t> results[2];
  std::thread threads[2];
  for (int t = 0; t < 2; ++t) {
    threads[t] = std::thread([&, t] {
      moe_context* ctx = nullptr;
      moe_context_params p = moe_context_default_params();
      p.n_threads = 1;
      ASSERT_EQ(moe_context_create(model_, &p, &ctx), MOE_OK);
      moe_sampling_params sp = moe_sampling_default_params();
      sp.temperature = 0;
      moe_generate_params gp = moe_generate_default_params();
      gp.sampling = &sp;
      gp.max_tokens = static_cast<int32_t>(want.size());
      for (int rep = 0; rep < 3; ++rep) {
        Collected c;
        ASSERT_EQ(moe_generate_tokens(ctx, prompt.data(), prompt.size(), &gp, Collect, &c), MOE_OK);
        results[t] = c.tokens;
        ASSERT_EQ(moe_context_reset(ctx), MOE_OK);
      }
      moe_context_free(ctx);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(results[0], want);
  EXPECT_EQ(results[1], want);
}

TEST_F(CApiTest, ChatTemplates) {
  moe_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi!"}};
  size_t len = 0;
  // This model ships no template: the error says so and how to pick one.
  EXPECT_EQ(moe_chat_apply_template(model_, nullptr, msgs, 2, 1, nullptr, 0, &len),
            MOE_ERROR_NOT_FOUND);
  EXPECT_NE(std::string(moe_last_error()).find("chat template"), std::string::npos);
  ASSERT_EQ(moe_chat_apply_template(model_, "chatml", msgs, 2, 1, nullptr, 0, &len),
            MOE_ERROR_BUFFER_TOO_SMALL);
  std::string out(len + 1, '\0');
  ASSERT_EQ(moe_chat_apply_template(model_, "chatml", msgs, 2, 1, out.data(), out.size(), &len),
            MOE_OK);
  out.resize(len);
  EXPECT_EQ(out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(moe_chat_apply_template(model_, "jinja-soup", msgs, 2, 1, nullptr, 0, &len),
            MOE_ERROR_INVALID_ARGUMENT);
  moe_chat_message bad[] = {{"wizard", "x"}};
  EXPECT_EQ(moe_chat_apply_template(model_, "chatml", bad, 1, 1, nullptr, 0, &len),
            MOE_ERROR_INVALID_ARGUMENT);
}

struct LogSink {
  std::vector<std::string> lines;
};

void OnLog(moe_log_level level, const char* msg, void* ud) {
  static_cast<LogSink*>(ud)->lines.push_back(std::to_string(level) + ":" + msg);
}

TEST(CApiLogTest, CallbackReceivesMessagesAtItsLevel) {
  LogSink sink;
  moe_set_log_callback(OnLog, MOE_LOG_INFO, &sink);
  moe_model* m = nullptr;
  ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &m), MOE_OK);
  moe_model_free(m);
  moe_set_log_callback(nullptr, MOE_LOG_INFO, nullptr);
  ASSERT_FALSE(sink.lines.empty());
  EXPECT_NE(sink.lines[0].find("qwen2moe"), std::string::npos);
  size_t before = sink.lines.size();
  ASSERT_EQ(moe_model_load(kModel.c_str(), nullptr, &m), MOE_OK);  // silent again
  moe_model_free(m);
  EXPECT_EQ(sink.lines.size(), before);
}

}  // namespace
