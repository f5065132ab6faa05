#include "tools/moe-cli/serve_test_command.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/json_text.h"
#include "lib/runtime/batch_engine.h"
#include "lib/runtime/engine.h"
#include "nlohmann/json.hpp"
#include "tools/distributed_flags.h"
#include "tools/flag_checks.h"
#include "tools/moe-cli/command_status.h"

namespace moe::cli {
namespace {

struct ServeTestOptions {
  std::string model;
  std::string requests;
  int clients = 8;
  int max_tokens = 64;
  int threads = 0;
  int ctx = 0;
  int max_sequences = 16;
  bool no_prefix_sharing = false;
  bool json = false;
  DistributedFlags distributed;
};

struct Line {
  RequestOptions request;
  std::string shown;  // the prompt's start, for the report
};

// One request per non-empty line: plain text is a prompt; a line starting with '{' is a JSON
// object {"prompt": ..., "max_tokens": ..., "temperature": ..., "seed": ..., "stop": [...]}.
absl::StatusOr<std::vector<Line>> ReadRequests(const ServeTestOptions& o) {
  std::ifstream f(o.requests);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", o.requests));
  std::vector<Line> out;
  std::string text;
  for (int number = 1; std::getline(f, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line line;
    GenerateOptions& g = line.request.generate;
    g.max_tokens = o.max_tokens;
    g.sampling.temperature = 0;
    if (text[0] == '{') {
      auto parsed = ParseJsonText(text);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(o.requests, ":", number, ": ", parsed.status().message()));
      }
      nlohmann::json j = *std::move(parsed);
      if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(o.requests, ":", number, ": a JSON request needs a \"prompt\" string"));
      }
      try {
        line.request.prompt = j["prompt"].get<std::string>();
        if (j.contains("max_tokens")) g.max_tokens = j["max_tokens"].get<int64_t>();
        if (j.contains("temperature")) g.sampling.temperature = j["temperature"].get<float>();
        if (j.contains("seed")) g.sampling.seed = j["seed"].get<uint64_t>();
        if (j.contains("stop")) g.stop = j["stop"].get<std::vector<std::string>>();
      } catch (const nlohmann::json::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(o.requests, ":", number, ": ", e.what()));
      }
    } else {
      line.request.prompt = text;
    }
    line.shown = line.request.prompt.substr(0, 32);
    std::replace(line.shown.begin(), line.shown.end(), '\n', ' ');
    out.push_back(std::move(line));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(o.requests, ": no requests"));
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

absl::Status Run(const ServeTestOptions& o) {
  auto lines = ReadRequests(o);
  if (!lines.ok()) return lines.status();
  LoadOptions lo;
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<World> world, World::Join(o.distributed, &lo));
  auto engine = Engine::Load(o.model, lo);
  if (!engine.ok()) return engine.status();
  if (world->serves()) return world->Serve(*engine, o.threads);
  BatchEngineOptions eo;
  eo.communicator = world->comm();
  eo.threads = o.threads;
  eo.n_ctx = o.ctx;
  eo.max_sequences = o.max_sequences;
  eo.prefix_sharing = !o.no_prefix_sharing;
  auto batch = BatchEngine::Create(*engine, eo);
  if (!batch.ok()) return batch.status();
  // Each client submits the next request, waits for it, and takes another.
  std::vector<absl::StatusOr<RequestResult>> results(lines->size(), absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.clients; ++c) {
    clients.emplace_back([&] {
      for (size_t i; (i = next++) < lines->size();) {
        auto id = (*batch)->Submit((*lines)[i].request, nullptr);
        results[i] = id.ok() ? (*batch)->Wait(*id) : absl::StatusOr<RequestResult>(id.status());
      }
    });
  }
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const BatchEngineStats st = (*batch)->stats();
  std::vector<double> ttft;
  int64_t generated = 0, failed = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (!r.ok()) {
      ++failed;
      if (o.json) {
        std::printf("%s\n",
                    nlohmann::json({{"request", i}, {"error", std::string(r.status().message())}})
                        .dump()
                        .c_str());
      } else {
        std::printf("%4zu  error: %s\n", i, std::string(r.status().message()).c_str());
      }
      continue;
    }
    ttft.push_back(r->stats.first_token_s);
    generated += r->stats.generated_tokens;
    if (o.json) {
      nlohmann::json j = {{"request", i},
                          {"generated_tokens", r->stats.generated_tokens},
                          {"prompt_tokens", r->stats.prompt_tokens},
                          {"prefix_tokens_reused", r->stats.prefix_tokens_reused},
                          {"queue_s", r->stats.queue_s},
                          {"first_token_s", r->stats.first_token_s},
                          {"total_s", r->stats.total_s},
                          {"decode_tokens_per_s", r->stats.decode_tok_s},
                          {"finish", static_cast<int>(r->finish)},
                          {"text", r->text}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%4zu  %-32s  %4lld tokens  first token %7.3f s  %6.1f tok/s  reused %lld\n", i,
                  (*lines)[i].shown.c_str(), static_cast<long long>(r->stats.generated_tokens),
                  r->stats.first_token_s, r->stats.decode_tok_s,
                  static_cast<long long>(r->stats.prefix_tokens_reused));
    }
  }
  const double p50 = Percentile(ttft, 0.5), p95 = Percentile(ttft, 0.95);
  if (o.json) {
    nlohmann::json j = {{"requests", results.size()},
                        {"failed", failed},
                        {"clients", o.clients},
                        {"wall_s", wall},
                        {"generated_tokens", generated},
                        {"tokens_per_s", generated / wall},
                        {"first_token_p50_s", p50},
                        {"first_token_p95_s", p95},
                        {"steps", st.steps},
                        {"mean_sequences_per_step", st.mean_sequences_per_step},
                        {"prefix_tokens_reused", st.prefix_tokens_reused},
                        {"preemptions", st.preemptions}};
    if (world->comm() != nullptr) {
      j["ranks"] = world->comm()->size();
      j["exchange_bytes"] = st.exchange_bytes;
      j["exchange_s"] = st.exchange_s;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "%zu requests (%lld failed) from %d clients in %.2f s: %lld tokens, %.1f tok/s; first "
        "token p50 %.3f s, p95 %.3f s; %lld steps, %.1f sequences per step, %lld prompt tokens "
        "reused, %lld preemptions\n",
        results.size(), static_cast<long long>(failed), o.clients, wall,
        static_cast<long long>(generated), generated / wall, p50, p95,
        static_cast<long long>(st.steps), st.mean_sequences_per_step,
        static_cast<long long>(st.prefix_tokens_reused), static_cast<long long>(st.preemptions));
    if (world->comm() != nullptr) {
      std::printf(
          "over %d ranks: %.1f KB exchanged per computed token, %.1f %% of the steps' time\n",
          world->comm()->size(), st.exchange_bytes / 1e3 / std::max<int64_t>(st.tokens, 1),
          st.step_s > 0 ? 100 * st.exchange_s / st.step_s : 0.0);
    }
  }
  if (failed > 0) return absl::AbortedError(absl::StrCat(failed, " request(s) failed"));
  return absl::OkStatus();
}

}  // namespace

void AddServeTestCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<ServeTestOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve-test", "replay requests from a file through the batching engine, several at once");
  cmd->add_option("-m,--model", opts->model, "model (.moe, .gguf or Hugging Face directory)")
      ->required();
  cmd->add_option("-r,--requests", opts->requests,
                  "one request per line: a prompt, or {\"prompt\": ..., \"max_tokens\": ..., "
                  "\"temperature\": ..., \"seed\": ..., \"stop\": [...]}")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-c,--clients", opts->clients, "clients submitting at once")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("-n,--max-tokens", opts->max_tokens, "tokens per request unless it says")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("-t,--threads", opts->threads, "threads (0 = one per core)")
      ->check(ThreadCount())
      ->capture_default_str();
  cmd->add_option("--ctx", opts->ctx, "tokens one request holds (0 = the model's, at most 4096)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--max-sequences", opts->max_sequences, "requests running at once")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_flag("--no-prefix-sharing", opts->no_prefix_sharing,
                "compute every prompt whole, even a prefix computed before");
  cmd->add_flag("--json", opts->json, "one JSON object per request, then one for the run");
  AddDistributedFlags(cmd, &opts->distributed);
  cmd->callback([opts, exit_code] { ReportStatus("serve-test", Run(*opts), exit_code); });
}

}  // namespace moe::cli
