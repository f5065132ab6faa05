// How a moe-cli subcommand ends: a failed status becomes "moe-cli NAME: message" on stderr and
// exit code 1.
#pragma once

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace moe::cli {

inline void ReportStatus(const char* command, const absl::Status& status, int* exit_code) {
  if (status.ok()) return;
  std::fprintf(stderr, "moe-cli %s: %s\n", command, std::string(status.message()).c_str());
  *exit_code = 1;
}

}  // namespace moe::cli
