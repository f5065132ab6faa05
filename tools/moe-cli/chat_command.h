// moe-cli chat: an interactive multi-turn chat over the model's chat template.
#pragma once

#include "CLI/CLI.hpp"

namespace moe::cli {

void AddChatCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
