// moe-cli: run a model from the command line.
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/moe-cli/chat_command.h"
#include "tools/moe-cli/perplexity_command.h"
#include "tools/moe-cli/profile_command.h"
#include "tools/moe-cli/prune_command.h"
#include "tools/moe-cli/run_command.h"
#include "tools/moe-cli/serve_test_command.h"
#include "tools/moe-cli/stats_command.h"
#include "tools/moe-cli/tokenize_command.h"

namespace {

// tokenize and detokenize parse their own flags (the tokenizer tests run them without CLI11):
// listed here like the other subcommands, they get everything after their name.
void AddForwardedCommand(CLI::App& app, const char* name, const char* description,
                         int (*main_fn)(int, char**), int* exit_code) {
  CLI::App* sub = app.add_subcommand(name, description);
  sub->prefix_command();
  sub->set_help_flag();  // --help goes to main_fn, which knows the flags
  sub->callback([sub, name, main_fn, exit_code] {
    std::vector<std::string> args = sub->remaining();
    args.insert(args.begin(), name);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    *exit_code = main_fn(static_cast<int>(argv.size()), argv.data());
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("libmoe command-line interface", "moe-cli");
  app.require_subcommand(1);
  int exit_code = 0;
  moe::cli::AddRunCommand(app, &exit_code);
  moe::cli::AddChatCommand(app, &exit_code);
  moe::cli::AddPerplexityCommand(app, &exit_code);
  moe::cli::AddProfileCommand(app, &exit_code);
  moe::cli::AddStatsCommand(app, &exit_code);
  moe::cli::AddPruneCommand(app, &exit_code);
  moe::cli::AddServeTestCommand(app, &exit_code);
  AddForwardedCommand(app, "tokenize", "print the token ids of a text (--help for its flags)",
                      moe::TokenizeMain, &exit_code);
  AddForwardedCommand(app, "detokenize", "print the text of token ids (--help for its flags)",
                      moe::DetokenizeMain, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
