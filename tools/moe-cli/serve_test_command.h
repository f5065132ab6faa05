// moe-cli serve-test: replays requests from a file through the batching engine, several clients
// at once, as a service would see them, and reports each request and the whole run.
#pragma once

#include "CLI/CLI.hpp"

namespace moe::cli {

// Registers the `serve-test` subcommand on app; its callback runs it and sets *exit_code.
void AddServeTestCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
