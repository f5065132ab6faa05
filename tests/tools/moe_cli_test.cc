// The command-line contract: moe-convert + moe-cli reproduce llama.cpp's greedy tokens and prompt
// logits for the fixtures, and bad input ends in a message and a non-zero exit, never a crash.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace {

namespace fs = std::filesystem;
const std::string kBin = std::string(MOE_BINARY_DIR) + "/tools/";
const fs::path kFixtures = fs::path(MOE_TESTDATA_DIR) / "fixtures";

struct Result {
  int exit_code;
  std::string out;
};

// Each test process has its own file: CTest runs the cases of this suite in parallel.
std::string StderrPath() {
  return (fs::temp_directory_path() / ("moe_cli_test_stderr." + std::to_string(::getpid())))
      .string();
}

Result RunCommand(const std::string& cmd) {
  Result r{-1, ""};
  FILE* p = popen((cmd + " 2>" + StderrPath()).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string Slurp(const fs::path& p) { return moe::testing::ReadFileBytes(p); }

std::string Ids(const fs::path& p) {
  std::istringstream s(Slurp(p));
  std::string out, tok;
  while (s >> tok) out += (out.empty() ? "" : " ") + tok;
  return out;
}

TEST(MoeCliTest, ConvertedModelsReproduceGreedyTokensAndLogits) {
  for (const char* name : {"tiny-llama-moe-f32", "tiny-olmoe-f32", "tiny-qwen2moe-f32"}) {
    SCOPED_TRACE(name);
    fs::path dir = kFixtures / name;
    std::string moe_path = (fs::temp_directory_path() / (std::string(name) + ".cli.moe")).string();
    Result conv = RunCommand(kBin + "moe-convert " +
                             (dir / (std::string(name) + ".gguf")).string() + " " + moe_path);
    ASSERT_EQ(conv.exit_code, 0);
    for (const std::string& model : {moe_path, (dir / (std::string(name) + ".gguf")).string()}) {
      std::string dump = moe_path + ".logits";
      Result run =
          RunCommand(kBin + "moe-cli run -m " + model + " --prompt-ids \"" +
                     Ids(dir / "p1.tokens.txt") + "\" -n 16 --greedy --dump-logits " + dump);
      ASSERT_EQ(run.exit_code, 0);
      // Every step of p1 has a margin above the tolerance for these models (see gen_info.tsv).
      EXPECT_EQ(run.out, Ids(dir / "p1.gen_tokens.txt") + "\n");
      std::string got = Slurp(dump), want = Slurp(dir / "p1.logits_rows.f32");
      ASSERT_EQ(got.size(), want.size());  // p1 stores every prompt position
      const float* g = reinterpret_cast<const float*>(got.data());
      const float* w = reinterpret_cast<const float*>(want.data());
      float max_abs = 0, max_err = 0;
      for (size_t i = 0; i < want.size() / 4; ++i) {
        max_abs = std::max(max_abs, std::fabs(w[i]));
        max_err = std::max(max_err, std::fabs(g[i] - w[i]));
      }
      EXPECT_LE(max_err, 1e-3f * max_abs);
      fs::remove(dump);
    }
    fs::remove(moe_path);
  }
}

// --trace: one JSON line per token fed to the model, in position order, each with the token the
// run was given or generated and every MoE layer's experts (top-4 of 16) and weights.
TEST(MoeCliTest, TraceWritesEachTokensRoutingAsJsonLines) {
  const fs::path dir = kFixtures / "tiny-qwen2moe-f32";
  const std::string trace =
      (fs::temp_directory_path() / ("moe_cli_trace." + std::to_string(::getpid()) + ".jsonl"))
          .string();
  const std::string prompt = Ids(dir / "p1.tokens.txt");
  Result run = RunCommand(kBin + "moe-cli run -m " + (dir / "tiny-qwen2moe-f32.gguf").string() +
                          " --prompt-ids \"" + prompt + "\" -n 4 --greedy --trace " + trace);
  ASSERT_EQ(run.exit_code, 0) << Slurp(StderrPath());
  std::vector<std::string> fed;
  std::istringstream ids(prompt + " " + run.out);
  for (std::string t; ids >> t;) fed.push_back(t);
  std::ifstream f(trace);
  std::string line;
  size_t n = 0;
  for (; std::getline(f, line); ++n) {
    SCOPED_TRACE(line);
    ASSERT_LT(n, fed.size());
    EXPECT_NE(line.find("\"position\":" + std::to_string(n) + ","), std::string::npos);
    EXPECT_NE(line.find("\"token\":" + fed[n] + "}"), std::string::npos);
    // Two MoE layers, four experts and four weights each.
    size_t layers = 0, at = 0;
    while ((at = line.find("\"experts\":[", at)) != std::string::npos) {
      const size_t end = line.find(']', at);
      EXPECT_EQ(std::count(line.begin() + at, line.begin() + end, ','), 3);
      ++layers;
      at = end;
    }
    EXPECT_EQ(layers, 2u);
  }
  EXPECT_EQ(n, fed.size());
  // The same trace summarised and drawn: moe-cli stats.
  const std::string png = trace + ".png";
  Result stats = RunCommand(kBin + "moe-cli stats --trace " + trace + " --plot " + png);
  ASSERT_EQ(stats.exit_code, 0) << Slurp(StderrPath());
  // A header, then per layer its index and choices: 4 per fed token.
  std::istringstream table(stats.out);
  std::string header;
  std::getline(table, header);
  EXPECT_EQ(header.rfind("layer  choices  fairness", 0), 0u) << stats.out;
  for (int64_t layer = 0; layer < 2; ++layer) {
    int64_t index = -1, choices = -1;
    std::string rest;
    table >> index >> choices;
    std::getline(table, rest);
    EXPECT_EQ(index, layer) << stats.out;
    EXPECT_EQ(choices, static_cast<int64_t>(fed.size()) * 4) << stats.out;
  }
  EXPECT_EQ(Slurp(png).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  fs::remove(png);
  EXPECT_NE(
      RunCommand(kBin + "moe-cli stats --trace " + trace + " --plot " + trace + ".gif").exit_code,
      0);
  EXPECT_NE(RunCommand(kBin + "moe-cli stats --profile " + trace).exit_code, 0);  // not a profile
  fs::remove(trace);
  Result bad = RunCommand(kBin + "moe-cli run -m " + (dir / "tiny-qwen2moe-f32.gguf").string() +
                          " --prompt-ids 1 -n 1 --trace /nonexistent/dir/trace.jsonl");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(Slurp(StderrPath()).find("cannot write the trace"), std::string::npos);
}

TEST(MoeCliTest, BadInputFailsCleanly) {
  fs::path gguf = kFixtures / "tiny-qwen2moe-f32" / "tiny-qwen2moe-f32.gguf";
  const std::vector<std::string> bad = {
      "moe-cli run -m /no/such/model.moe --prompt-ids \"1 2\" --greedy",
      "moe-cli run -m " + gguf.string() + " --prompt-ids \"1 99999999\" --greedy",
      "moe-cli run -m " + gguf.string() + " --prompt-ids \"1 x\" --greedy",
      "moe-cli run -m " + gguf.string() + " --prompt-ids \"1 2\" --greedy -n 300",
      "moe-cli run -m " + gguf.string() + " --prompt-ids \"1 2\" --greedy --kv-type q9",
      "moe-cli run -m " + std::string(MOE_TESTDATA_DIR) +
          "/fixtures/README.md --prompt-ids 1 --greedy",
      "moe-cli frobnicate",
      "moe-convert /no/such/file.gguf /tmp/out.moe",
      // Flags the library would reject, or that make no sense, are usage errors.
      "moe-cli run -m " + gguf.string() + " -p hi -n -5",
      "moe-cli run -m " + gguf.string() + " -p hi -c -5",
      "moe-cli run -m " + gguf.string() + " -p hi -t -3",
      "moe-cli run -m " + gguf.string() + " -p hi --temp nan",
      "moe-cli run -m " + gguf.string() + " -p hi --top-p 2",
      "moe-cli chat -m " + gguf.string() + " --template chatml -t -1 < /dev/null",
      "moe-bench -m " + gguf.string() + " -r 0",
      "moe-bench -m " + gguf.string() + " --bandwidth-gib 0",
      "moe-cli tokenize -m " + gguf.string(),
  };
  for (const auto& cmd : bad) {
    Result r = RunCommand(kBin + cmd);
    EXPECT_GT(r.exit_code, 0) << cmd;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << cmd;
    EXPECT_FALSE(Slurp(StderrPath()).empty()) << "no message: " << cmd;
  }
}

// -1 tokens: until the end of the text or a full context, as llama.cpp users read it.
TEST(MoeCliTest, MinusOneTokensRunsUntilTheContextIsFull) {
  fs::path gguf = kFixtures / "tiny-qwen2moe-f32" / "tiny-qwen2moe-f32.gguf";
  Result r = RunCommand(kBin + "moe-cli run -m " + gguf.string() +
                        " --prompt-ids \"1 2\" --greedy -c 32 -n -1");
  ASSERT_EQ(r.exit_code, 0) << Slurp(StderrPath());
  std::istringstream ids(r.out);
  int n = 0;
  for (int id; ids >> id;) ++n;
  EXPECT_EQ(n, 32 - 2);  // token ids run without stopping at end of text: the context fills
}

// A text prompt asking for more tokens than the context holds generates until it is full, and
// says so: the output is not left to look like the model's own end.
TEST(MoeCliTest, ATextRunCutByAFullContextSaysSo) {
  fs::path gguf = kFixtures / "tiny-olmoe-q8_0" / "tiny-olmoe-q8_0.gguf";
  const std::string run = kBin + "moe-cli run -m " + gguf.string() + " -p \"Hello world\" --greedy";
  Result cut = RunCommand(run + " -c 12 -n 50");
  ASSERT_EQ(cut.exit_code, 0) << Slurp(StderrPath());
  const std::string said = Slurp(StderrPath());
  EXPECT_NE(said.find("the context of 12 tokens filled after"), std::string::npos) << said;
  EXPECT_NE(said.find("of the 50 tokens asked for"), std::string::npos) << said;
  Result fits = RunCommand(run + " -c 12 -n 2");
  ASSERT_EQ(fits.exit_code, 0);
  EXPECT_EQ(Slurp(StderrPath()).find("filled"), std::string::npos) << Slurp(StderrPath());
}

TEST(MoeCliTest, TokenizeAndDetokenizeAreListedAndHaveHelp) {
  Result help = RunCommand(kBin + "moe-cli --help");
  EXPECT_NE(help.out.find("tokenize"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("detokenize"), std::string::npos) << help.out;
  for (const char* sub : {"tokenize", "detokenize"}) {
    Result r = RunCommand(kBin + "moe-cli " + sub + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("usage: moe-cli " + std::string(sub)), std::string::npos) << r.out;
  }
  fs::path gguf = kFixtures / "tiny-llama-moe-f32" / "tiny-llama-moe-f32.gguf";
  Result words = RunCommand(kBin + "moe-cli tokenize -m " + gguf.string() + " Hello world");
  Result piped = RunCommand("printf 'Hello world' | " + kBin + "moe-cli tokenize -m " +
                            gguf.string() + " --file -");
  ASSERT_EQ(words.exit_code, 0);
  EXPECT_EQ(words.out, "15043 3186\n");  // llama-spm, as in the tokenizer tests
  EXPECT_EQ(piped.out, words.out);
  Result back = RunCommand(kBin + "moe-cli detokenize -m " + gguf.string() + " 15043 3186");
  EXPECT_EQ(back.out, "Hello world\n");
}

TEST(MoeCliTest, InspectReportsActiveParameterFraction) {
  fs::path gguf = kFixtures / "tiny-olmoe-f32" / "tiny-olmoe-f32.gguf";
  Result r = RunCommand(kBin + "moe-inspect --no-tensors " + gguf.string());
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("architecture  olmoe"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of all parameters (top-8 of 32 experts)"), std::string::npos) << r.out;
}

TEST(MoeCliTest, TextPromptStreamsAndJsonCarriesTelemetry) {
  fs::path gguf = kFixtures / "tiny-olmoe-q8_0" / "tiny-olmoe-q8_0.gguf";
  Result r = RunCommand(kBin + "moe-cli run -m " + gguf.string() +
                        " -p \"Hello world\" -n 6 --seed 3 --json");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("\"generated_tokens\":"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"active_fraction\":"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"expert_counts\":[["), std::string::npos) << r.out;
  // Same seed, same text.
  Result again = RunCommand(kBin + "moe-cli run -m " + gguf.string() +
                            " -p \"Hello world\" -n 6 --seed 3 --json");
  auto field = [](const std::string& json, const std::string& key) {
    size_t at = json.find("\"" + key + "\":");
    return at == std::string::npos
               ? std::string()
               : json.substr(at, json.find_first_of("]\"", json.find(':', at) + 2) - at);
  };
  EXPECT_FALSE(field(r.out, "tokens").empty());
  EXPECT_EQ(field(again.out, "tokens"), field(r.out, "tokens"));
  EXPECT_EQ(field(again.out, "text"), field(r.out, "text"));
  Result stats = RunCommand(kBin + "moe-cli run -m " + gguf.string() + " -p Hi -n 4 --stats");
  ASSERT_EQ(stats.exit_code, 0);
  std::string err = Slurp(StderrPath());
  EXPECT_NE(err.find("parameters per token"), std::string::npos) << err;
  EXPECT_NE(err.find("layer 0"), std::string::npos) << err;
}

// --echo puts the prompt on stdout right before its continuation, so the lines loading writes on
// stderr (here with --stats) never land inside the sentence on a terminal; without it stdout is
// the continuation alone.
TEST(MoeCliTest, EchoPrintsThePromptBeforeItsContinuation) {
  fs::path gguf = kFixtures / "tiny-olmoe-q8_0" / "tiny-olmoe-q8_0.gguf";
  const std::string run =
      kBin + "moe-cli run -m " + gguf.string() + " -p \"Hello world\" -n 6 --seed 3";
  Result plain = RunCommand(run);
  Result echoed = RunCommand(run + " --echo --stats");
  ASSERT_EQ(plain.exit_code, 0);
  ASSERT_EQ(echoed.exit_code, 0);
  EXPECT_GT(plain.out.size(), 1u);
  EXPECT_EQ(echoed.out, "Hello world" + plain.out);
  EXPECT_NE(Slurp(StderrPath()).find("experts: resident"), std::string::npos);
}

// -p "" is an empty prompt, not a missing one: the error says so.
TEST(MoeCliTest, AnEmptyPromptIsAnErrorThatSaysSo) {
  fs::path gguf = kFixtures / "tiny-olmoe-q8_0" / "tiny-olmoe-q8_0.gguf";
  Result r = RunCommand(kBin + "moe-cli run -m " + gguf.string() + " -p \"\" -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(Slurp(StderrPath()).find("the prompt given with -p is empty"), std::string::npos)
      << Slurp(StderrPath());
  r = RunCommand(kBin + "moe-cli run -m " + gguf.string() + " -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(Slurp(StderrPath()).find("give exactly one of -p TEXT or --prompt-ids"),
            std::string::npos)
      << Slurp(StderrPath());
}

// serve-test replays a file's requests through the batching engine, several clients at once:
// each greedy request gets the text `moe-cli run` gives it; a malformed line is an error naming it.
TEST(MoeCliTest, ServeTestReplaysRequestsAndEachGetsItsRunOutput) {
  fs::path gguf = kFixtures / "tiny-qwen2moe-q4_0" / "tiny-qwen2moe-q4_0.gguf";
  const fs::path requests =
      fs::temp_directory_path() / ("moe_serve_test_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(requests)
      << "Hello world\n\n{\"prompt\": \"Once upon a time\", \"max_tokens\": 5}\n"
         "Hello world\nThe quick brown fox\n";
  Result r = RunCommand(kBin + "moe-cli serve-test -m " + gguf.string() + " -r " +
                        requests.string() + " -c 3 -n 7 -t 2 --ctx 128 --json");
  ASSERT_EQ(r.exit_code, 0) << Slurp(StderrPath());
  EXPECT_NE(r.out.find("\"requests\":4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"failed\":0"), std::string::npos) << r.out;
  auto text_of = [](const std::string& json_lines, int request) {
    std::istringstream in(json_lines);
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"request\":" + std::to_string(request) + ",") == std::string::npos) continue;
      const size_t at = line.find("\"text\":\"");
      if (at == std::string::npos) return std::string();
      return line.substr(at + 8, line.find('"', at + 8) - (at + 8));
    }
    return std::string("(missing)");
  };
  Result lone = RunCommand(kBin + "moe-cli run -m " + gguf.string() +
                           " -p \"Hello world\" -n 7 --temp 0 --kv-type f16 --json");
  ASSERT_EQ(lone.exit_code, 0);
  EXPECT_FALSE(text_of(r.out, 0).empty()) << r.out;
  EXPECT_EQ(text_of(r.out, 0), text_of(r.out, 2)) << "the same prompt twice";
  EXPECT_NE(lone.out.find("\"text\":\"" + text_of(r.out, 0) + "\""), std::string::npos)
      << lone.out << "\n"
      << r.out;
  std::ofstream(requests) << "{\"prompt\": 3}\n";
  Result bad =
      RunCommand(kBin + "moe-cli serve-test -m " + gguf.string() + " -r " + requests.string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(Slurp(StderrPath()).find(":1: a JSON request needs"), std::string::npos);
  fs::remove(requests);
}

// The expert store from the command line: a routing profile written by `moe-cli profile` warms a
// cached run, which gives the resident run's tokens and reports the cache per layer; a memory
// limit below the weights turns the cache on by itself and says so.
TEST(MoeCliTest, ProfileWarmsACachedRunAndAMemoryLimitCachesExperts) {
  fs::path gguf = kFixtures / "tiny-olmoe-q8_0" / "tiny-olmoe-q8_0.gguf";
  const std::string text =
      ::testing::TempDir() + "/moe_cli_profile_text_" + std::to_string(::getpid()) + ".txt";
  const std::string profile = text + ".json";
  std::ofstream(text) << "Once upon a time there was a small model that read its experts from "
                         "the disk, one layer after another.";
  Result p = RunCommand(kBin + "moe-cli profile -m " + gguf.string() + " --file " + text + " -o " +
                        profile);
  ASSERT_EQ(p.exit_code, 0) << Slurp(StderrPath());
  EXPECT_NE(p.out.find("hottest 12.5%"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("routing locality"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("LRU"), std::string::npos) << p.out;
  EXPECT_NE(Slurp(profile).find("libmoe-routing-profile"), std::string::npos);
  const std::string run =
      kBin + "moe-cli run -m " + gguf.string() + " --prompt-ids \"1 2 3 4 5\" -n 8 --greedy --json";
  Result resident = RunCommand(run);
  ASSERT_EQ(resident.exit_code, 0);
  Result cached = RunCommand(run + " --expert-cache 50% --expert-warmup " + profile);
  ASSERT_EQ(cached.exit_code, 0) << Slurp(StderrPath());
  auto tokens = [](const std::string& json) {
    size_t at = json.find("\"tokens\":");
    return at == std::string::npos ? std::string() : json.substr(at, json.find(']', at) - at);
  };
  EXPECT_FALSE(tokens(resident.out).empty());
  EXPECT_EQ(tokens(cached.out), tokens(resident.out));
  EXPECT_NE(cached.out.find("\"layers\":[{"), std::string::npos) << cached.out;
  EXPECT_NE(Slurp(StderrPath()).find("experts: cached from disk"), std::string::npos);
  Result one_reader = RunCommand(run + " --expert-cache 50% --expert-io-threads 1");
  ASSERT_EQ(one_reader.exit_code, 0) << Slurp(StderrPath());
  EXPECT_EQ(tokens(one_reader.out), tokens(resident.out));
  Result limited = RunCommand(run + " --memory-limit 5MiB");  // the weights take 5.5 MiB
  EXPECT_EQ(limited.exit_code, 0) << Slurp(StderrPath());
  EXPECT_EQ(tokens(limited.out), tokens(resident.out));
  EXPECT_NE(Slurp(StderrPath()).find("the routed experts stay in the file"), std::string::npos)
      << Slurp(StderrPath());
  Result bad = RunCommand(run + " --expert-cache 50% --expert-warmup " + text);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(Slurp(StderrPath()).find("routing profile"), std::string::npos) << Slurp(StderrPath());
  fs::remove(text);
  fs::remove(profile);
}

// moe-cli prune: a profile of a text, the experts under the share dropped, a smaller .moe that
// runs and never routes to them; bad shares and a profile of another model are refused.
TEST(MoeCliTest, PruneWritesASmallerModelThatRuns) {
  fs::path gguf = kFixtures / "tiny-olmoe-q8_0" / "tiny-olmoe-q8_0.gguf";
  const std::string base = ::testing::TempDir() + "/moe_cli_prune_" + std::to_string(::getpid());
  const std::string text = base + ".txt", profile = base + ".json", out = base + ".moe";
  std::ofstream(text) << "A few words are enough to show which experts a layer likes best, and "
                         "which it hardly ever asks for.";
  ASSERT_EQ(RunCommand(kBin + "moe-cli profile -m " + gguf.string() + " --file " + text + " -o " +
                       profile)
                .exit_code,
            0)
      << Slurp(StderrPath());
  Result pruned = RunCommand(kBin + "moe-cli prune -m " + gguf.string() + " --profile " + profile +
                             " --keep 0.7 -o " + out);
  ASSERT_EQ(pruned.exit_code, 0) << Slurp(StderrPath());
  EXPECT_NE(pruned.out.find("layer 0: "), std::string::npos) << pruned.out;
  EXPECT_NE(pruned.out.find("pruned "), std::string::npos) << pruned.out;
  EXPECT_LT(fs::file_size(out), fs::file_size(gguf));
  Result run = RunCommand(kBin + "moe-cli run -m " + out +
                          " --prompt-ids \"1 2 3 4 5\" -n 6 --greedy --json");
  EXPECT_EQ(run.exit_code, 0) << Slurp(StderrPath());
  EXPECT_NE(run.out.find("\"tokens\":"), std::string::npos) << run.out;
  Result inspect = RunCommand(kBin + "moe-inspect " + out);
  EXPECT_EQ(inspect.exit_code, 0) << Slurp(StderrPath());
  EXPECT_NE(inspect.out.find("pruned "), std::string::npos) << inspect.out;

  Result bad_share = RunCommand(kBin + "moe-cli prune -m " + gguf.string() + " --profile " +
                                profile + " --keep 0 -o " + out);
  EXPECT_NE(bad_share.exit_code, 0);
  fs::path other = kFixtures / "tiny-qwen2moe-q4_0" / "tiny-qwen2moe-q4_0.gguf";
  Result wrong = RunCommand(kBin + "moe-cli prune -m " + other.string() + " --profile " + profile +
                            " --keep 0.9 -o " + out);
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(Slurp(StderrPath()).find("moe-cli prune"), std::string::npos) << Slurp(StderrPath());
  for (const auto& f : {text, profile, out}) fs::remove(f);
}

// perplexity --kl-base: a model against itself diverges by nothing; a quantized one by a little.
TEST(MoeCliTest, PerplexityReportsTheKlDivergenceFromAReference) {
  const std::string f32 = (kFixtures / "tiny-qwen2moe-f32" / "tiny-qwen2moe-f32.gguf").string();
  const std::string q4 = (kFixtures / "tiny-qwen2moe-q4_0" / "tiny-qwen2moe-q4_0.gguf").string();
  const std::string ids = ::testing::TempDir() + "/moe_cli_kl_" + std::to_string(::getpid());
  std::ofstream(ids) << "1 17 99 4 250 31 8 77 12 5 600 42 3 9 1000 7";
  const std::string cmd = kBin + "moe-cli perplexity --ids-file " + ids + " -c 16 --kl-base " + f32;
  Result self = RunCommand(cmd + " -m " + f32);
  ASSERT_EQ(self.exit_code, 0) << Slurp(StderrPath());
  EXPECT_NE(self.out.find("mean 0.000000 nats; same top token 100.00% of 15 positions"),
            std::string::npos)
      << self.out;
  Result quantized = RunCommand(cmd + " -m " + q4);
  ASSERT_EQ(quantized.exit_code, 0) << Slurp(StderrPath());
  const size_t at = quantized.out.find("mean ");
  ASSERT_NE(at, std::string::npos) << quantized.out;
  EXPECT_GT(std::stod(quantized.out.substr(at + 5)), 0.0) << quantized.out;
  fs::remove(ids);
}

TEST(MoeCliTest, ChatAnswersEachLineOfStdin) {
  fs::path gguf = kFixtures / "tiny-qwen2moe-f32" / "tiny-qwen2moe-f32.gguf";
  Result r = RunCommand("printf 'hello\\nagain\\n' | " + kBin + "moe-cli chat -m " + gguf.string() +
                        " --template chatml -n 4 --seed 1");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  // Without a template and without --template, chat says what to do.
  Result bad = RunCommand("printf 'hi\\n' | " + kBin + "moe-cli chat -m " + gguf.string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(Slurp(StderrPath()).find("--template"), std::string::npos);
}

}  // namespace
