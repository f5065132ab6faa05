#include "tools/moe-cli/run_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "lib/base/status_macros.h"
#include "lib/runtime/session.h"
#include "tools/device_flags.h"
#include "tools/distributed_flags.h"
#include "tools/expert_cache_flag.h"
#include "tools/flag_checks.h"
#include "tools/moe-cli/command_status.h"
#include "tools/moe-cli/routing_trace.h"
#include "tools/moe-cli/stats_report.h"
#include "tools/moe-cli/token_ids.h"
#include "tools/routing_flags.h"

namespace moe::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  int n_predict = 64;
  bool greedy = false;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  std::string dump_logits;
  std::string kv_type = "f32";
  int threads = 0;
  int ctx = 0;
  bool mmap = false;
  ExpertFlags experts;
  DeviceFlags device;
  DistributedFlags distributed;
  RoutingPolicy routing;
  std::string trace;
  bool stats = false;
  bool json = false;
  bool parse_special = false;
  bool echo = false;
  bool prompt_given = false;  // -p was on the command line, even as ""
};

// A progress bar on stderr while the model loads, only when stderr is a terminal.
bool ProgressBar(float f) {
  static bool tty = isatty(STDERR_FILENO);
  if (!tty) return true;
  int filled = static_cast<int>(f * 30);
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled,
               "==============================", 30 - filled, "", static_cast<int>(f * 100));
  if (f >= 1.0f) std::fprintf(stderr, "\r%*s\r", 50, "");
  return true;
}

absl::Status Run(const RunOptions& o) {
  if (o.prompt_given && o.prompt.empty() && o.prompt_ids.empty()) {
    return absl::InvalidArgumentError("the prompt given with -p is empty: give some text");
  }
  if (o.prompt.empty() == o.prompt_ids.empty()) {
    return absl::InvalidArgumentError("give exactly one of -p TEXT or --prompt-ids \"1 2 3\"");
  }
  LoadOptions lo;
  lo.use_mmap = o.mmap;
  lo.progress = ProgressBar;
  if (absl::Status s = ApplyExpertFlags(o.experts, &lo); !s.ok()) return s;
  MOE_RETURN_IF_ERROR(ApplyDeviceFlags(o.device, &lo));
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<World> world, World::Join(o.distributed, &lo));
  if (world->serves()) lo.progress = nullptr;  // one progress bar: rank 0's
  auto engine = Engine::Load(o.model, lo);
  if (!engine.ok()) return engine.status();
  if (world->serves()) {
    MOE_RETURN_IF_ERROR(world->Serve(*engine, o.threads));
    return o.stats ? world->Memory(**engine).status() : absl::OkStatus();
  }
  if ((*engine)->expert_store() != nullptr || o.stats) {
    std::fprintf(stderr, "%s\n", ExpertPlacementLine(**engine).c_str());
  }
  if (lo.device != ComputeDevice::kCpu || o.stats) {
    std::fprintf(stderr, "device: %s\n", (*engine)->device_note().c_str());
  }
  SessionOptions so;
  so.n_ctx = o.ctx;
  so.threads = o.threads;
  so.kv_type = o.kv_type == "f16" ? DType::kF16 : o.kv_type == "q8_0" ? DType::kQ8_0 : DType::kF32;
  so.seed = o.seed;
  so.routing = o.routing;
  so.communicator = world->comm();
  auto session = Session::Create(*engine, so);
  if (!session.ok()) return session.status();
  Session& s = **session;
  RoutingTraceRecorder trace;
  if (!o.trace.empty()) MOE_RETURN_IF_ERROR(trace.Open(o.trace, s));

  GenerateOptions go;
  // -1: as many as the context holds; generation also ends at the end of the text (for text
  // prompts) or where the context fills up.
  go.max_tokens = o.n_predict >= 0 ? o.n_predict : s.n_ctx();
  go.stop = o.stop;
  go.parse_special = o.parse_special;
  SamplerConfig& sc = go.sampling;
  sc.temperature = o.greedy ? 0.0f : o.temperature;
  sc.top_k = o.top_k;
  sc.top_p = o.top_p;
  sc.min_p = o.min_p;
  sc.repeat_penalty = o.repeat_penalty;
  sc.frequency_penalty = o.frequency_penalty;
  sc.presence_penalty = o.presence_penalty;
  sc.seed = o.seed;

  std::vector<int32_t> generated;
  std::string text;
  absl::Status st;
  if (!o.prompt_ids.empty()) {
    // The token-id contract: prompt ids in, generated ids out on one line.
    auto ids = ParseTokenIds(o.prompt_ids);
    if (!ids.ok()) return ids.status();
    if (ids->empty()) return absl::InvalidArgumentError("empty --prompt-ids");
    if (o.n_predict >= 0 && static_cast<int64_t>(ids->size()) + o.n_predict > s.n_ctx()) {
      return absl::OutOfRangeError("prompt of " + std::to_string(ids->size()) + " tokens plus " +
                                   std::to_string(o.n_predict) +
                                   " to generate exceeds the context of " +
                                   std::to_string(s.n_ctx()) + " (-c to enlarge it)");
    }
    if (!o.dump_logits.empty()) {
      std::vector<float> all;
      st = s.Decode(*ids, &all);
      if (!st.ok()) return st;
      std::ofstream f(o.dump_logits, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(all.data()), all.size() * sizeof(float));
      if (!f) return absl::PermissionDeniedError("cannot write '" + o.dump_logits + "'");
      ids->clear();  // already in the context
    }
    go.stop_at_eog = false;  // exactly n tokens, as llama.cpp's reference runs
    st = s.GenerateFromTokens(*ids, go, [&](int32_t tok, absl::string_view piece) {
      if (tok >= 0) generated.push_back(tok);
      text.append(piece.data(), piece.size());
      return true;
    });
    if (!st.ok()) return st;
    if (!o.json) {
      std::string line;
      for (int32_t t : generated) line += (line.empty() ? "" : " ") + std::to_string(t);
      std::printf("%s\n", line.c_str());
    }
  } else {
    // The prompt goes out only now, after the lines loading wrote on stderr: printed before
    // the command (as the demo once did), a terminal showed them inside the sentence.
    if (o.echo && !o.json) std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
    st = s.Generate(o.prompt, go, [&](int32_t tok, absl::string_view piece) {
      if (tok >= 0) generated.push_back(tok);
      text.append(piece.data(), piece.size());
      if (!o.json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
    if (!st.ok()) return st;
    if (!o.json) std::printf("\n");
    // Asked for more than the context held: said, not left to look like the model's own end.
    if (o.n_predict >= 0 && s.stats().finish == FinishReason::kContextFull) {
      std::fprintf(stderr,
                   "moe-cli run: the context of %lld tokens filled after %zu of the %lld tokens "
                   "asked for (-c to enlarge it)\n",
                   static_cast<long long>(s.n_ctx()), generated.size(),
                   static_cast<long long>(o.n_predict));
    }
  }
  if (!o.trace.empty()) MOE_RETURN_IF_ERROR(trace.Finish(s));
  if (o.json) std::printf("%s\n", StatsJson(**engine, s.stats(), text, generated).c_str());
  if (o.stats) {
    std::fprintf(stderr, "%s", StatsTable(**engine, s.stats()).c_str());
    if (world->comm() != nullptr) {
      session->reset();  // closes its mirrors on the serving ranks before they stop
      MOE_ASSIGN_OR_RETURN(std::vector<RankMemory> memory, world->Memory(**engine));
      std::fprintf(stderr, "%s", World::MemoryTable(memory).c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "generate a continuation of a prompt");
  run->add_option("-m,--model", o->model, "model file (.moe or .gguf)")->required();
  CLI::Option* prompt = run->add_option("-p,--prompt", o->prompt, "prompt text");
  run->add_option("--prompt-ids", o->prompt_ids,
                  "prompt as space-separated token ids, used exactly as given (no BOS added)");
  run->add_option("-n,--n-predict", o->n_predict,
                  "tokens to generate (-1 = until the end of the text or a full context)")
      ->check(AtLeast(-1, "-1 = until the end or a full context"))
      ->capture_default_str();
  run->add_flag("--greedy", o->greedy, "greedy decoding (argmax, lowest id on ties)");
  run->add_option("--temp", o->temperature, "temperature (0 = greedy)")
      ->check(NumberIn(0, 100, "0 = greedy"))
      ->capture_default_str();
  run->add_option("--top-k", o->top_k, "top-k (0 = off)")
      ->check(AtLeast(0, "0 = off"))
      ->capture_default_str();
  run->add_option("--top-p", o->top_p, "top-p (1 = off)")
      ->check(NumberIn(0, 1, "1 = off"))
      ->capture_default_str();
  run->add_option("--min-p", o->min_p, "min-p (0 = off)")
      ->check(NumberIn(0, 1, "0 = off"))
      ->capture_default_str();
  run->add_option("--repeat-penalty", o->repeat_penalty, "repetition penalty (1 = off)")
      ->check(NumberIn(1e-6, 1e6, "1 = off"));
  run->add_option("--frequency-penalty", o->frequency_penalty, "frequency penalty (0 = off)")
      ->check(Finite());
  run->add_option("--presence-penalty", o->presence_penalty, "presence penalty (0 = off)")
      ->check(Finite());
  run->add_option("-s,--seed", o->seed, "random seed (same seed, same output)");
  run->add_option("--stop", o->stop, "stop string (repeatable)");
  run->add_flag("--parse-special", o->parse_special, "recognise control tokens in the prompt");
  run->add_flag("--echo", o->echo,
                "print a text prompt on stdout before its continuation (not with --json)");
  run->add_option("--dump-logits", o->dump_logits,
                  "with --prompt-ids: write every prompt position's logits here "
                  "(float32 LE, [n_prompt x n_vocab])");
  run->add_option("--kv-type", o->kv_type, "KV cache element type")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}))
      ->capture_default_str();
  run->add_option("-t,--threads", o->threads, "threads (0 = one per core)")->check(ThreadCount());
  run->add_option("-c,--ctx-size", o->ctx, "context length (0 = trained length, at most 4096)")
      ->check(AtLeast(0, "0 = the trained length"));
  run->add_flag("--mmap", o->mmap,
                "map the weights from the file instead of copying them into memory");
  AddExpertFlags(run, &o->experts);
  AddDeviceFlags(run, &o->device);
  AddRoutingFlags(run, &o->routing);
  AddDistributedFlags(run, &o->distributed);
  run->add_option("--trace", o->trace,
                  "write each processed token's routing here, one JSON line per token (position, "
                  "token, piece, per MoE layer the experts and their weights)");
  run->add_flag("--stats", o->stats,
                "print telemetry (stages, experts, active parameters) to stderr");
  run->add_flag("--json", o->json, "print one JSON object (text, tokens, statistics) to stdout");
  run->callback([o, prompt, exit_code] {
    o->prompt_given = prompt->count() > 0;
    ReportStatus("run", Run(*o), exit_code);
  });
}

}  // namespace moe::cli
