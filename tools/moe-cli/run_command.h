// moe-cli run: prompt in, tokens out.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace moe::cli {

struct RunOptions {
  std::string model;
  std::string prompt_ids;
  int n_predict = 16;
  bool greedy = false;
  std::string dump_logits;
  std::string kv_type = "f32";
  int threads = 0;
  int ctx = 0;
};

// Registers the `run` subcommand on app; its callback runs it and sets *exit_code.
void AddRunCommand(CLI::App& app, int* exit_code);

}  // namespace moe::cli
