// moe-cli profile: which experts a text routes to, written as a routing profile (the expert
// cache's warm-up, lib/moe/routing_profile.h).
#pragma once

#include "CLI/CLI.hpp"

namespace moe::cli {

// Registers the `profile` subcommand on app; its callback runs it and sets *exit_code.
void AddProfileCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
