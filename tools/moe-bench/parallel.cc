#include "tools/moe-bench/parallel.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "lib/runtime/batch_engine.h"
#include "lib/runtime/session.h"
#include "nlohmann/json.hpp"

namespace moe::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int64_t n_vocab, int count) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(n_vocab) - 1);
  std::vector<int32_t> out(count);
  for (auto& t : out) t = token(rng);
  return out;
}

BatchEngineOptions EngineOptions(const ParallelOptions& o, int sequences, int64_t positions) {
  BatchEngineOptions e;
  e.threads = o.threads;
  e.own_thread = false;  // stepped here, so each step is timed alone
  e.max_sequences = sequences;
  e.n_ctx = positions + 1;
  e.kv_tokens = static_cast<int64_t>(sequences) * (positions + 64);
  e.max_step_tokens = 512;
  e.prefix_sharing = o.prefix_sharing;
  e.communicator = o.communicator;
  return e;
}

// a - b, stage by stage.
StageTimes Minus(const StageTimes& a, const StageTimes& b) {
  StageTimes d;
  d.attention_s = a.attention_s - b.attention_s;
  d.router_s = a.router_s - b.router_s;
  d.experts_s = a.experts_s - b.experts_s;
  d.head_s = a.head_s - b.head_s;
  d.other_s = a.other_s - b.other_s;
  return d;
}

// Prints the error; the exit code.
int Failed(const absl::Status& s) {
  std::fprintf(stderr, "moe-bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

// The requests' results, or the first error: a failed step finishes its requests with it.
absl::StatusOr<std::vector<RequestResult>> Results(BatchEngine& be,
                                                   const std::vector<uint64_t>& ids) {
  std::vector<RequestResult> out;
  for (uint64_t id : ids) {
    absl::StatusOr<RequestResult> r = be.Wait(id);
    if (!r.ok()) return r.status();
    if (!r->status.ok()) return r->status;
    out.push_back(*std::move(r));
  }
  return out;
}

RequestOptions Request(std::vector<int32_t> tokens, int generate) {
  RequestOptions r;
  r.tokens = std::move(tokens);
  r.generate.sampling.temperature = 0;
  r.generate.max_tokens = generate;
  r.generate.stop_at_eog = false;  // every sequence generates all its tokens
  return r;
}

// Decode tok/s of a lone Session (today's single-sequence path) on the same prompt and length,
// for the engine's single-sequence row to be held against.
double SessionDecodeSpeed(std::shared_ptr<const Engine> engine, const ParallelOptions& o,
                          std::mt19937& rng) {
  SessionOptions so;
  so.threads = o.threads;
  so.n_ctx = o.prompt + o.generate + 1;
  so.kv_type = DType::kF16;
  so.n_batch = 512;
  so.communicator = o.communicator;
  auto session = Session::Create(engine, so);
  if (!session.ok()) return 0;
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_tokens = o.generate;
  g.stop_at_eog = false;
  const std::vector<int32_t> prompt = RandomTokens(rng, engine->model()->hp().n_vocab, o.prompt);
  if (!(*session)->GenerateFromTokens(prompt, g, nullptr).ok()) return 0;
  const SessionStats& st = (*session)->stats();
  return st.generate_s > 0 ? st.generated_tokens / st.generate_s : 0;
}

}  // namespace

int RunParallel(std::shared_ptr<const Engine> engine, const ParallelOptions& o,
                const std::vector<int>& sequences) {
  const int64_t n_vocab = engine->model()->hp().n_vocab;
  std::mt19937 rng(7);
  double session_tg = 0;
  for (int rep = 0; rep < o.reps; ++rep) session_tg += SessionDecodeSpeed(engine, o, rng) / o.reps;
  if (o.json) {
    nlohmann::json j = {{"test", "context"},
                        {"prompt", o.prompt},
                        {"generate", o.generate},
                        {"threads", o.threads},
                        {"decode_tokens_per_s", session_tg}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("one context (moe_context, for comparison): decode %.2f tok/s\n", session_tg);
  }
  if (!o.json) {
    std::printf(
        "batching engine: pp %d and tg %d per sequence, %d threads, KV F16 in blocks of 32\n",
        o.prompt, o.generate, o.threads);
    std::printf("%5s %14s %18s %16s %10s %14s %8s%s\n", "seqs", "prompt tok/s",
                "decode tok/s (all)", "per sequence", "step ms", "experts/layer", "KV MiB",
                o.communicator ? "  exchanged KB/token" : "");
  }
  for (int n : sequences) {
    double prompt_s = 0, decode_s = 0, experts = 0, kv_mib = 0, exchanged = 0;
    int64_t prompt_tokens = 0, decode_tokens = 0, decode_steps = 0;
    StageTimes stages;  // of the decode steps
    for (int rep = 0; rep < o.reps; ++rep) {
      auto be = BatchEngine::Create(engine, EngineOptions(o, n, o.prompt + o.generate));
      if (!be.ok()) return Failed(be.status());
      kv_mib = static_cast<double>((*be)->stats().kv_bytes) / (1 << 20);
      std::vector<uint64_t> ids;
      for (int i = 0; i < n; ++i) {
        auto id = (*be)->Submit(Request(RandomTokens(rng, n_vocab, o.prompt), o.generate), nullptr);
        if (!id.ok()) return Failed(id.status());
        ids.push_back(*id);
      }
      // A step whose tokens are all decode tokens is a decode step; the others read prompts.
      for (;;) {
        const BatchEngineStats before = (*be)->stats();
        const auto t0 = Clock::now();
        auto worked = (*be)->Step();
        const double s = Since(t0);
        if (!worked.ok()) return Failed(worked.status());
        if (!*worked) break;
        const BatchEngineStats after = (*be)->stats();
        const int64_t tokens = after.tokens - before.tokens;
        const int64_t decode = after.decode_tokens - before.decode_tokens;
        if (decode == tokens) {
          decode_s += s;
          decode_tokens += decode;
          ++decode_steps;
          experts += after.mean_experts_per_step * after.steps -
                     before.mean_experts_per_step * before.steps;
          exchanged += static_cast<double>(after.exchange_bytes - before.exchange_bytes);
          stages += Minus(after.time, before.time);
        } else {
          prompt_s += s;
          prompt_tokens += tokens;
        }
      }
      if (auto results = Results(**be, ids); !results.ok()) return Failed(results.status());
    }
    const double pp = prompt_s > 0 ? prompt_tokens / prompt_s : 0;
    const double tg = decode_s > 0 ? decode_tokens / decode_s : 0;
    const double step_ms = decode_steps > 0 ? 1e3 * decode_s / decode_steps : 0;
    auto per_step = [&](double seconds) {
      return decode_steps > 0 ? 1e3 * seconds / decode_steps : 0;
    };
    const double per_layer = decode_steps > 0 ? experts / decode_steps : 0;
    const double exchanged_kb = decode_tokens > 0 ? exchanged / decode_tokens / 1e3 : 0;
    if (o.json) {
      nlohmann::json j = {{"test", "parallel"},        {"sequences", n},
                          {"prompt", o.prompt},        {"generate", o.generate},
                          {"threads", o.threads},      {"prompt_tokens_per_s", pp},
                          {"decode_tokens_per_s", tg}, {"decode_tokens_per_s_per_sequence", tg / n},
                          {"decode_step_ms", step_ms}, {"experts_per_layer_per_step", per_layer},
                          {"kv_mib", kv_mib}};
      if (o.communicator) j["decode_exchanged_bytes_per_token"] = exchanged_kb * 1e3;
      j["decode_step_ms_by_stage"] = {{"attention", per_step(stages.attention_s)},
                                      {"router", per_step(stages.router_s)},
                                      {"experts", per_step(stages.experts_s)},
                                      {"head", per_step(stages.head_s)},
                                      {"other", per_step(stages.other_s)}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%5d %14.1f %18.2f %16.2f %10.1f %14.1f %8.1f", n, pp, tg, tg / n, step_ms,
                  per_layer, kv_mib);
      if (o.communicator) std::printf(" %20.1f", exchanged_kb);
      std::printf("\n");
      std::printf(
          "      decode step ms by stage: attention %.2f, router %.2f, experts %.2f, "
          "head %.2f, other %.2f\n",
          per_step(stages.attention_s), per_step(stages.router_s), per_step(stages.experts_s),
          per_step(stages.head_s), per_step(stages.other_s));
    }
  }
  return 0;
}

int RunPrefixTtft(std::shared_ptr<const Engine> engine, const ParallelOptions& o, int prefix,
                  int requests) {
  const int64_t n_vocab = engine->model()->hp().n_vocab;
  std::mt19937 rng(11);
  const std::vector<int32_t> system = RandomTokens(rng, n_vocab, prefix);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < requests; ++i) {
    std::vector<int32_t> p = system;
    for (int32_t t : RandomTokens(rng, n_vocab, 16)) p.push_back(t);
    prompts.push_back(std::move(p));
  }
  for (bool sharing : {false, true}) {
    BatchEngineOptions eo = EngineOptions(o, requests, prefix + 16 + o.generate);
    eo.prefix_sharing = sharing;
    auto be = BatchEngine::Create(engine, eo);
    if (!be.ok()) return Failed(be.status());
    // Each request arrives once the one before has its first token; the earlier ones keep
    // generating beside it.
    std::vector<uint64_t> ids;
    for (int i = 0; i < requests; ++i) {
      bool first = false;
      auto id = (*be)->Submit(Request(prompts[i], o.generate), [&](const RequestEvent& ev) {
        if (ev.token >= 0) first = true;
        return true;
      });
      if (!id.ok()) return Failed(id.status());
      ids.push_back(*id);
      // Until it has its first token (or the engine has nothing left: it ended).
      for (absl::StatusOr<bool> worked = true; !first && *worked;) {
        worked = (*be)->Step();
        if (!worked.ok()) return Failed(worked.status());
      }
    }
    for (absl::StatusOr<bool> worked = true; *worked;) {
      worked = (*be)->Step();
      if (!worked.ok()) return Failed(worked.status());
    }
    auto results = Results(**be, ids);
    if (!results.ok()) return Failed(results.status());
    std::vector<double> ttft;
    int64_t reused = 0;
    for (const RequestResult& r : *results) {
      ttft.push_back(r.stats.first_token_s);
      reused += r.stats.prefix_tokens_reused;
    }
    if (o.json) {
      nlohmann::json j = {{"test", "prefix_ttft"}, {"prefix", prefix},
                          {"requests", requests},  {"prefix_sharing", sharing},
                          {"ttft_s", ttft},        {"prefix_tokens_reused", reused}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::string line;
      for (double t : ttft) line += absl::StrFormat(" %.0f", 1e3 * t);
      std::printf(
          "prefix %d, sharing %-3s: time to first token (ms):%s; last/first %.1f%%; %lld prompt "
          "tokens reused\n",
          prefix, sharing ? "on" : "off", line.c_str(), 100.0 * ttft.back() / ttft.front(),
          static_cast<long long>(reused));
    }
  }
  return 0;
}

}  // namespace moe::bench
