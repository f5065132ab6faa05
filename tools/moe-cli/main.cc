// moe-cli: run a model from the command line.
#include <cstring>

#include "CLI/CLI.hpp"
#include "tools/moe-cli/chat_command.h"
#include "tools/moe-cli/perplexity_command.h"
#include "tools/moe-cli/run_command.h"
#include "tools/moe-cli/tokenize_command.h"

int main(int argc, char** argv) {
  // tokenize/detokenize parse their own flags.
  if (argc >= 2 && std::strcmp(argv[1], "tokenize") == 0)
    return moe::TokenizeMain(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "detokenize") == 0) {
    return moe::DetokenizeMain(argc - 1, argv + 1);
  }
  CLI::App app("libmoe command-line interface", "moe-cli");
  app.footer(
      "Also: moe-cli tokenize -m MODEL --file TEXT [--add-bos] [--parse-special]\n"
      "      moe-cli detokenize -m MODEL --ids \"1 2 3\"");
  app.require_subcommand(1);
  int exit_code = 0;
  moe::cli::AddRunCommand(app, &exit_code);
  moe::cli::AddChatCommand(app, &exit_code);
  moe::cli::AddPerplexityCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
