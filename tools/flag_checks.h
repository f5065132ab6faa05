// CLI11 checks for the tools' numeric flags, so that a value the library would reject (or one
// that makes no sense, like zero repetitions) is a clear usage error, not a silent surprise.
// CLI::Range is not enough: NaN passes it, since every comparison with NaN is false.
#pragma once

#include <cmath>
#include <limits>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace moe::cli {

// A number in [lo, hi] (NaN never is); `what` says what the number means, for the message.
inline CLI::Validator NumberIn(double lo, double hi, const std::string& what = "") {
  return CLI::Validator(
      [lo, hi, what](std::string& text) -> std::string {
        double v;
        if (!absl::SimpleAtod(text, &v) || std::isnan(v)) return "'" + text + "' is not a number";
        if (v < lo || v > hi) {
          std::string range =
              hi == std::numeric_limits<double>::infinity() ? absl::StrCat(">= ", lo)
                                                            : absl::StrCat("in [", lo, ", ", hi, "]");
          return absl::StrCat(text, " is out of range: it must be ", range,
                              what.empty() ? "" : " (", what, what.empty() ? "" : ")");
        }
        return "";
      },
      absl::StrCat("NUMBER"), "NumberIn");
}

inline CLI::Validator AtLeast(double lo, const std::string& what = "") {
  return NumberIn(lo, std::numeric_limits<double>::infinity(), what);
}

// Finite (no NaN, no infinity), any sign.
inline CLI::Validator Finite() {
  const double inf = std::numeric_limits<double>::max();
  return NumberIn(-inf, inf);
}

// The thread counts the library accepts: 0 means one per core.
inline CLI::Validator ThreadCount() { return NumberIn(0, 1024, "0 = one per core"); }

}  // namespace moe::cli
