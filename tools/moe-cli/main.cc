// moe-cli: run a model from the command line.
#include "CLI/CLI.hpp"
#include "tools/moe-cli/run_command.h"

int main(int argc, char** argv) {
  CLI::App app("libmoe command-line interface", "moe-cli");
  app.require_subcommand(1);
  int exit_code = 0;
  moe::cli::AddRunCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
