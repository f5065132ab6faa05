// Telemetry of a generate call, as a table for people and as JSON for programs.
#pragma once

#include <string>
#include <vector>

#include "lib/runtime/session.h"

namespace moe::cli {

std::string StatsTable(const Engine& engine, const SessionStats& stats);
std::string StatsJson(const Engine& engine, const SessionStats& stats, const std::string& text,
                      const std::vector<int32_t>& tokens);

}  // namespace moe::cli
