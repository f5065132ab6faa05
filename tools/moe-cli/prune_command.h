// moe-cli prune: removes the experts a routing profile shows carry little traffic, writing a
// smaller .moe whose router never picks them (lib/moe/expert_pruning.h).
#pragma once

#include "CLI/CLI.hpp"

namespace moe::cli {

// Registers the `prune` subcommand on app; its callback runs it and sets *exit_code.
void AddPruneCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
