#include "tools/moe-cli/chat_command.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "lib/runtime/chat_template.h"
#include "lib/runtime/session.h"
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
    auto full = FormatChat(*format, messages, /*add_generation_prompt=*/true, eos);
    if (!full.ok()) return full.status();
    std::string feed;
    if (absl::StartsWith(*full, rendered)) {
      feed = full->substr(rendered.size());  // only the new turn: the cache keeps the rest
    } else {
      s.Reset();
      feed = *full;
    }
    std::string reply;
    g_generating = 1;
    absl::Status st = s.Generate(feed, go, [&](int32_t, absl::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      reply.append(piece.data(), piece.size());
      return true;
    });
    g_generating = 0;
    std::printf("\n");
    if (absl::IsCancelled(st)) {
      std::fprintf(stderr, "[stopped]\n");
    } else if (absl::IsResourceExhausted(st)) {
      std::fprintf(stderr, "[context full: starting over]\n");
      s.Reset();
      messages.clear();
      rendered.clear();
      if (!o.system.empty()) messages.push_back({"system", o.system});
      continue;
    } else if (!st.ok()) {
      return st;
    }
    messages.push_back({"assistant", reply});
    // What the context now holds: the prompt, the reply, and the end-of-turn token when the
    // model ended its turn itself. Anything else makes the next turn re-render from scratch.
    rendered = *full + reply + (s.stats().finish == FinishReason::kEndOfGeneration ? eos : "");
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
      "chat format instead of the model's: chatml, llama3, mistral, llama2, zephyr, deepseek");
  chat->add_option("-n,--n-predict", o->max_tokens, "most tokens per answer")
      ->capture_default_str();
  chat->add_option("--temp", o->temperature, "temperature")->capture_default_str();
  chat->add_option("-s,--seed", o->seed, "random seed");
  chat->add_option("-t,--threads", o->threads, "threads (0 = one per core)");
  chat->add_option("-c,--ctx-size", o->ctx, "context length (0 = trained length, at most 4096)");
  chat->callback([o, exit_code] { ReportStatus("chat", Chat(*o), exit_code); });
}

}  // namespace moe::cli
