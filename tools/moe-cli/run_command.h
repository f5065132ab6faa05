// moe-cli run: prompt in, continuation out.
#pragma once

#include "CLI/CLI.hpp"

namespace moe::cli {

// Registers the `run` subcommand on app; its callback runs it and sets *exit_code.
void AddRunCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
