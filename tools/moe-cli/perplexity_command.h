// moe-cli perplexity: how well a model predicts a text, scored with sliding windows.
#pragma once

#include "CLI/CLI.hpp"

namespace moe::cli {

// Registers the `perplexity` subcommand on app; its callback runs it and sets *exit_code.
void AddPerplexityCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
