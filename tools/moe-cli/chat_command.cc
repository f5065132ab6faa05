#include "tools/moe-cli/chat_command.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/runtime/chat_template.h"
#include "lib/runtime/session.h"
#include "tools/flag_checks.h"
#include "tools/moe-cli/command_status.h"

namespace moe::cli {
namespace {

struct ChatOptions {
  std::string model;
  std::string system;
  std::string template_name;
  int max_tokens = 256;
  float temperature = 0.7f;
  uint64_t seed = 0;
  int threads = 0;
  int ctx = 0;
};

// Ctrl-C cancels the answer being generated; at the prompt it ends the chat.
Session* volatile g_active = nullptr;
volatile sig_atomic_t g_generating = 0;
volatile sig_atomic_t g_quit = 0;

void OnSigint(int) {
  if (g_generating && g_active != nullptr) {
    g_active->Cancel();  // an atomic store: safe in a signal handler
  } else {
    g_quit = 1;
    ::close(STDIN_FILENO);  // unblock the line read
  }
}

// What to feed for the next turn: the new text, and whether the context must start over.
struct TurnPlan {
  std::string feed;
  bool from_scratch = false;
  int64_t room = 0;  // tokens left for the answer
  int dropped = 0;   // oldest messages dropped to make room
};

// Fits the conversation into the context as chat front-ends do: reuse what the context holds
// when the new turn fits after it; otherwise start over from the rendered conversation; when
// even that leaves too little room for an answer, drop the oldest messages (never the system
// prompt) until it fits. Fails when the system prompt and the question alone do not fit.
absl::StatusOr<TurnPlan> PlanTurn(ChatFormat format, std::vector<ChatMessage>& messages,
                                  const std::string& rendered, const Session& s,
                                  const Tokenizer& tok, absl::string_view eos, int64_t want_room) {
  auto count = [&](const std::string& text, bool at_start) {
    EncodeOptions eo;
    eo.add_bos = at_start && tok.data().add_bos;
    eo.parse_special = true;
    return static_cast<int64_t>(tok.Encode(text, eo).size());
  };
  TurnPlan plan;
  for (;;) {
    MOE_ASSIGN_OR_RETURN(std::string full,
                         FormatChat(format, messages, /*add_generation_prompt=*/true, eos));
    if (plan.dropped == 0 && !rendered.empty() && absl::StartsWith(full, rendered)) {
      plan.feed = full.substr(rendered.size());  // only the new turn: the cache keeps the rest
      plan.room = s.n_ctx() - s.n_past() - count(plan.feed, false);
      if (plan.room >= want_room) return plan;
    }
    plan.feed = full;
    plan.from_scratch = true;
    plan.room = s.n_ctx() - count(full, true);
    if (plan.room >= want_room) return plan;
    // The oldest message after the system prompt goes, but never the question just asked.
    const size_t first = !messages.empty() && messages[0].role == "system" ? 1 : 0;
    if (messages.size() - first <= 1) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the question does not fit: with the system prompt it leaves ", plan.room,
          " of the context's ", s.n_ctx(), " tokens for the answer (-c to enlarge it)"));
    }
    messages.erase(messages.begin() + first);
    ++plan.dropped;
  }
}

absl::Status Chat(const ChatOptions& o) {
  auto engine = Engine::Load(o.model, {});
  if (!engine.ok()) return engine.status();
  auto tok = (*engine)->RequireTokenizer();
  if (!tok.ok()) return tok.status();
  const std::string& jinja = (*engine)->model()->spec().tokenizer.chat_template;
  auto format =
      o.template_name.empty() ? DetectChatFormat(jinja) : ChatFormatFromName(o.template_name);
  if (!format.ok()) {
    if (format.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError("the model has no chat template: pick one with --template chatml");
    }
    return format.status();
  }
  SessionOptions so;
  so.n_ctx = o.ctx;
  so.threads = o.threads;
  so.seed = o.seed;
  auto session = Session::Create(*engine, so);
  if (!session.ok()) return session.status();
  Session& s = **session;
  const std::string eos =
      (*tok)->eos_id() >= 0 ? (*tok)->TokenToPiece((*tok)->eos_id()).value_or("") : "";

  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  std::string rendered;  // the text the context holds so far
  GenerateOptions go;
  go.max_tokens = o.max_tokens;
  go.sampling.temperature = o.temperature;
  go.sampling.seed = o.seed;
  go.parse_special = true;  // the template's control tokens must be recognised

  g_active = &s;
  std::signal(SIGINT, OnSigint);
  std::fprintf(stderr,
               "chat with %s — Ctrl-C stops an answer, Ctrl-D or Ctrl-C at the prompt quits\n",
               o.model.c_str());
  std::string line;
  while (!g_quit) {
    std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    // An answer may fill what is left of the context, but a turn starts with room for at least
    // a quarter of it (or the whole -n, if smaller), dropping old turns when needed.
    const int64_t want_room = std::max<int64_t>(
        1, o.max_tokens >= 0 ? std::min<int64_t>(o.max_tokens, s.n_ctx() / 4) : s.n_ctx() / 4);
    auto plan = PlanTurn(*format, messages, rendered, s, **tok, eos, want_room);
    if (!plan.ok()) {
      std::fprintf(stderr, "[%s]\n", std::string(plan.status().message()).c_str());
      messages.pop_back();
      continue;
    }
    if (plan->dropped > 0) {
      std::fprintf(stderr, "[context full: dropped the %d oldest message%s to make room]\n",
                   plan->dropped, plan->dropped == 1 ? "" : "s");
    }
    if (plan->from_scratch) {
      absl::Status reset = s.Reset();
      if (!reset.ok()) return reset;
      rendered.clear();
    }
    go.max_tokens = o.max_tokens >= 0 ? std::min<int64_t>(o.max_tokens, plan->room) : plan->room;
    std::string reply;
    g_generating = 1;
    absl::Status st = s.Generate(plan->feed, go, [&](int32_t, absl::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      reply.append(piece.data(), piece.size());
      return true;
    });
    g_generating = 0;
    std::printf("\n");
    if (absl::IsCancelled(st)) {
      std::fprintf(stderr, "[stopped]\n");
    } else if (!st.ok()) {
      return st;
    }
    const FinishReason finish = s.stats().finish;
    if (finish == FinishReason::kContextFull || finish == FinishReason::kMaxTokens) {
      std::fprintf(
          stderr, "[answer cut at %s]\n",
          finish == FinishReason::kContextFull ? "the end of the context" : "the -n limit");
    }
    messages.push_back({"assistant", reply});
    // What the context now holds: the prompt, the reply, and the end-of-turn token when the
    // model ended its turn itself. Anything else makes the next turn re-render from scratch.
    auto full = FormatChat(*format, std::vector<ChatMessage>(messages.begin(), messages.end() - 1),
                           /*add_generation_prompt=*/true, eos);
    if (!full.ok()) return full.status();
    rendered = absl::IsCancelled(st)
                   ? ""
                   : *full + reply + (finish == FinishReason::kEndOfGeneration ? eos : "");
  }
  g_active = nullptr;
  std::signal(SIGINT, SIG_DFL);
  return absl::OkStatus();
}

}  // namespace

void AddChatCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* chat = app.add_subcommand("chat", "interactive multi-turn chat");
  chat->add_option("-m,--model", o->model, "model file (.moe or .gguf)")->required();
  chat->add_option("--system", o->system, "system prompt");
  chat->add_option(
      "--template", o->template_name,
      "chat template instead of the model's: chatml, llama3, mistral, llama2, zephyr, deepseek, "
      "plain, chatglm4, deepseek3, gpt-oss");
  chat->add_option("-n,--n-predict", o->max_tokens,
                   "most tokens per answer (-1 = as many as the context has room for)")
      ->check(AtLeast(-1, "-1 = as many as fit"))
      ->capture_default_str();
  chat->add_option("--temp", o->temperature, "temperature (0 = greedy)")
      ->check(NumberIn(0, 100, "0 = greedy"))
      ->capture_default_str();
  chat->add_option("-s,--seed", o->seed, "random seed");
  chat->add_option("-t,--threads", o->threads, "threads (0 = one per core)")->check(ThreadCount());
  chat->add_option("-c,--ctx-size", o->ctx, "context length (0 = trained length, at most 4096)")
      ->check(AtLeast(0, "0 = the trained length"));
  chat->callback([o, exit_code] { ReportStatus("chat", Chat(*o), exit_code); });
}

}  // namespace moe::cli
