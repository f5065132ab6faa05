// moe-cli stats: expert utilisation from a routing profile (moe-cli profile, a context's
// moe_context_write_routing_profile) or a routing trace (moe-cli run --trace): per layer the
// experts' shares and Jain's fairness on stdout, and with --plot a heatmap (PNG or SVG).
#pragma once

#include "CLI/CLI.hpp"

namespace moe::cli {

// Registers the `stats` subcommand on app; its callback runs it and sets *exit_code.
void AddStatsCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
