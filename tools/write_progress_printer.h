// The tools' report of a model file being written: converting a large checkpoint takes minutes
// to hours, which a silent tool leaves the user to guess at.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "lib/base/write_progress.h"

namespace moe::cli {

// On a terminal, one line rewritten in place at each whole percent ("moe-convert: writing 37 %
// (12.3 of 33.1 GB)", MB for files under a gigabyte); elsewhere (logs, CI) a line at each
// tenth. Never cancels.
inline WriteProgress PrintWriteProgress(std::string tool) {
  const bool terminal = isatty(fileno(stderr)) != 0;
  auto shown = std::make_shared<int>(-1);
  return [tool = std::move(tool), terminal, shown](uint64_t written, uint64_t total) {
    const int percent = total > 0 ? static_cast<int>(100 * written / total) : 100;
    const int step = terminal ? percent : percent / 10 * 10;
    if (step == *shown) return true;
    *shown = step;
    // MB below a gigabyte: a small model's "0.0 of 0.0 GB" said nothing.
    const bool gigabytes = total >= 1000000000;
    const double unit = gigabytes ? 1e9 : 1e6;
    std::fprintf(stderr, "%s%s: writing %d %% (%.1f of %.1f %s)%s", terminal ? "\r" : "",
                 tool.c_str(), percent, written / unit, total / unit, gigabytes ? "GB" : "MB",
                 !terminal || written == total ? "\n" : "");
    return true;
  };
}

}  // namespace moe::cli
