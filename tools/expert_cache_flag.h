// --expert-cache SIZE|PERCENT, shared by moe-cli and moe-bench: routed experts come from the model
// file through a cache of that many bytes ("2GiB", "512MiB", "64MB", "1000000") or that share of
// all expert bytes ("25%"). The budget is applied by LoadOptions (lib/runtime/engine.h).
#pragma once

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/runtime/engine.h"

namespace moe::cli {

// Sets options' expert-cache budget from the flag's text; "" leaves every expert resident.
inline absl::Status ApplyExpertCacheFlag(const std::string& text, LoadOptions* options) {
  if (text.empty()) return absl::OkStatus();
  std::string t = absl::AsciiStrToLower(text);
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--expert-cache '", text,
                     "': give a size (2GiB, 512MiB, 64MB, bytes) or a percentage of "
                     "the expert bytes (25%)"));
  };
  if (!t.empty() && t.back() == '%') {
    double percent;
    if (!absl::SimpleAtod(t.substr(0, t.size() - 1), &percent) || !(percent > 0) || percent > 100) {
      return bad();
    }
    options->expert_cache_fraction = percent / 100;
    return absl::OkStatus();
  }
  static constexpr struct {
    const char* suffix;
    double scale;
  } kUnits[] = {{"gib", 1073741824.0}, {"mib", 1048576.0}, {"kib", 1024.0}, {"gb", 1e9},
                {"mb", 1e6},           {"kb", 1e3},        {"b", 1.0}};
  double scale = 1;
  for (const auto& u : kUnits) {
    const std::string s = u.suffix;
    if (t.size() > s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0) {
      scale = u.scale;
      t.resize(t.size() - s.size());
      break;
    }
  }
  double value;
  if (!absl::SimpleAtod(t, &value) || !(value > 0) || !std::isfinite(value * scale)) return bad();
  options->expert_cache_bytes = static_cast<size_t>(value * scale);
  return absl::OkStatus();
}

// One line for the load: where the experts are and, when cached, the budget and the I/O mode.
inline std::string ExpertPlacementLine(const Engine& engine) {
  const ExpertStore* store = engine.expert_store();
  if (store == nullptr) return "experts: resident";
  const auto& cache = store->cache();
  const double all = static_cast<double>(store->total_expert_bytes());
  return absl::StrCat("experts: cached from disk, budget ", cache.capacity_bytes() / 1048576.0,
                      " MiB (", cache.slot_count(), " of ", store->n_layer() * store->n_expert(),
                      " experts, ", 100.0 * cache.capacity_bytes() / all,
                      "% of the expert bytes), ",
                      ExpertFileReader::ModeName(store->reader().mode()), " I/O");
}

}  // namespace moe::cli
