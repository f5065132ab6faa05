// The bundled model (models/tiny-brown-moe, converted to .moe by the build) against what its
// training script measured in PyTorch: logits on held-out sentences, the tokenization of the
// held-out sample, and the perplexity `moe-cli perplexity` prints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/runtime/engine.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const fs::path kSource = fs::path(MOE_SOURCE_DIR) / "models" / "tiny-brown-moe";

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Json ReadJson(const fs::path& p) { return Json::parse(ReadAll(p)); }

std::shared_ptr<const Engine> LoadBundled() {
  auto engine = Engine::Load(MOE_BUNDLED_MODEL, {});
  EXPECT_TRUE(engine.ok()) << engine.status() << " (the build converts models/tiny-brown-moe)";
  return engine.ok() ? *engine : nullptr;
}

TEST(BundledModelTest, LogitsMatchPyTorch) {
  auto engine = LoadBundled();
  ASSERT_NE(engine, nullptr);
  const HParams& h = engine->model()->hp();
  const Json meta = ReadJson(kSource / "reference_logits.json");
  ASSERT_EQ(meta["n_vocab"].get<int64_t>(), h.n_vocab);
  const std::string raw = ReadAll(kSource / "reference_logits.f32");
  std::vector<float> want(raw.size() / 4);
  std::memcpy(want.data(), raw.data(), want.size() * 4);
  double max_abs = 0;
  for (float v : want) max_abs = std::max(max_abs, std::fabs(static_cast<double>(v)));
  const double tol = 1e-3 * max_abs;

  auto backend = CreateCpuBackend(1);
  Transformer tf(engine->model(), backend.get());
  size_t row = 0;
  for (const Json& s : meta["sentences"]) {
    const std::vector<int32_t> ids = s["ids"].get<std::vector<int32_t>>();
    auto cache = KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim, DType::kF32);
    ASSERT_TRUE(cache.ok());
    std::vector<float> logits;
    ASSERT_TRUE(tf.Forward(ids, *cache, LogitsFor::kAll, &logits).ok());
    ASSERT_LE((row + ids.size()) * h.n_vocab, want.size());
    double err = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      err = std::max(err, std::fabs(static_cast<double>(logits[i]) - want[row * h.n_vocab + i]));
    }
    std::printf("[bundled] \"%s\": max |logit err| %.3g, tol %.3g\n",
                s["text"].get<std::string>().c_str(), err, tol);
    EXPECT_LE(err, tol);
    row += ids.size();
  }
  EXPECT_EQ(row * h.n_vocab, want.size());
}

TEST(BundledModelTest, TokenizesTheHeldOutSampleAsSentencePieceDoes) {
  auto engine = LoadBundled();
  ASSERT_NE(engine, nullptr);
  auto tok = engine->RequireTokenizer();
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<int32_t> want;
  std::istringstream ids(ReadAll(kSource / "heldout_sample.ids"));
  for (int32_t x; ids >> x;) want.push_back(x);
  std::vector<int32_t> got = (*tok)->Encode(ReadAll(kSource / "heldout_sample.txt"));
  got.insert(got.begin(), (*tok)->bos_id());
  EXPECT_EQ(got, want);
}

// Runs moe-cli and returns what it printed.
std::string RunCli(const std::string& args) {
  const std::string cmd = std::string(MOE_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof(buf), p)) out += buf;
  if (p) {
    EXPECT_EQ(pclose(p), 0) << cmd << "\n" << out;
  }
  return out;
}

double ParsePerplexity(const std::string& out) {
  double ppl = -1;
  EXPECT_EQ(std::sscanf(out.c_str(), "perplexity %lf", &ppl), 1) << out;
  return ppl;
}

TEST(BundledModelTest, CliPerplexityEqualsTrainingScript) {
  const Json report = ReadJson(kSource / "training_report.json");
  const double want = report["heldout_sample"]["perplexity"].get<double>();
  const std::string model = std::string(" -m ") + MOE_BUNDLED_MODEL;
  const double from_text = ParsePerplexity(
      RunCli("perplexity" + model + " --file " + (kSource / "heldout_sample.txt").string()));
  std::printf("[bundled] perplexity: moe-cli %.4f, training script %.4f\n", from_text, want);
  EXPECT_NEAR(from_text, want, 0.01 * want);
  // From the training script's own token ids: only the arithmetic differs, so much closer.
  const double from_ids = ParsePerplexity(
      RunCli("perplexity" + model + " --ids-file " + (kSource / "heldout_sample.ids").string()));
  EXPECT_NEAR(from_ids, want, 1e-3 * want);
  // Far below the unigram model's (on the whole held-out split).
  EXPECT_LT(report["heldout"]["perplexity"].get<double>(),
            0.5 * report["heldout"]["unigram_perplexity"].get<double>());
}

// The default model chats out of the box: its template is one the library knows, and with the
// defaults (answers that may fill the 256-token context) every question is answered, the
// oldest turns dropped to make room, and the user told so.
TEST(BundledModelTest, ChatsOutOfTheBoxAndKeepsAnsweringWhenTheContextFills) {
  // Three lines of the held-out sample are the questions.
  const fs::path questions_path = fs::path(::testing::TempDir()) / "moe_bundled_chat_questions";
  const int questions = 3;
  {
    std::ifstream sample(kSource / "heldout_sample.txt");
    std::ofstream q(questions_path);
    std::string line;
    for (int i = 0; i < questions && std::getline(sample, line);) {
      if (!line.empty()) q << line << "\n", ++i;
    }
  }
  const std::string out = RunCli(std::string("chat -m ") + MOE_BUNDLED_MODEL + " --seed 5 < " +
                                 questions_path.string());
  fs::remove(questions_path);
  EXPECT_EQ(out.find("unknown chat template"), std::string::npos) << out;
  EXPECT_EQ(out.find("starting over"), std::string::npos) << out;
  EXPECT_EQ(out.find("does not fit"), std::string::npos) << out;
  EXPECT_NE(out.find("[context full: dropped the"), std::string::npos) << out;
  size_t answers = 0;
  for (size_t at = out.find("\n> "); at != std::string::npos; at = out.find("\n> ", at + 1)) {
    const size_t next = out.find("\n> ", at + 1);
    if (next == std::string::npos) break;
    // Between two prompts there is answer text, not only status lines.
    std::string between = out.substr(at + 3, next - at - 3);
    std::string text;
    std::istringstream lines(between);
    for (std::string l; std::getline(lines, l);) {
      if (!l.empty() && l[0] != '[') text += l;
    }
    answers += !text.empty();
  }
  EXPECT_EQ(answers, static_cast<size_t>(questions)) << out;
}

TEST(BundledModelTest, IsAMixtralLayoutMoe) {
  auto engine = LoadBundled();
  ASSERT_NE(engine, nullptr);
  const HParams& h = engine->model()->hp();
  EXPECT_EQ(engine->model()->spec().arch, Arch::kLlama);
  EXPECT_GE(h.n_expert, 8);
  EXPECT_EQ(h.n_expert_used, 2);
  EXPECT_LT(h.n_head_kv, h.n_head);  // grouped-query attention
  EXPECT_LE(fs::file_size(kSource / "model.safetensors"), 40u << 20);
}

}  // namespace
}  // namespace moe
