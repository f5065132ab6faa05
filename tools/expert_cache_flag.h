// The expert store's flags, shared by moe-cli and moe-bench: --expert-cache SIZE|PERCENT (routed
// experts come from the model file through a cache of that many bytes, "2GiB", "512MiB", "64MB",
// "1000000", or that share of all expert bytes, "25%"), the eviction policy, a placement file,
// prefetch off, and the memory the model may take. Applied by LoadOptions
// (lib/runtime/engine.h).
#pragma once

#include <cmath>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/runtime/engine.h"

namespace moe::cli {

// A byte count as people write it: "2GiB", "512MiB", "64MB", "1000000".
inline std::optional<size_t> ParseByteSize(const std::string& text) {
  std::string t = absl::AsciiStrToLower(text);
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
  if (!absl::SimpleAtod(t, &value) || !(value > 0) || !std::isfinite(value * scale)) {
    return std::nullopt;
  }
  return static_cast<size_t>(value * scale);
}

// Sets options' expert-cache budget from the flag's text; "" leaves every expert resident.
inline absl::Status ApplyExpertCacheFlag(const std::string& text, LoadOptions* options) {
  if (text.empty()) return absl::OkStatus();
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--expert-cache '", text,
                     "': give a size (2GiB, 512MiB, 64MB, bytes) or a percentage of "
                     "the expert bytes (25%)"));
  };
  if (text.back() == '%') {
    double percent;
    if (!absl::SimpleAtod(text.substr(0, text.size() - 1), &percent) || !(percent > 0) ||
        percent > 100) {
      return bad();
    }
    options->expert_cache_fraction = percent / 100;
    return absl::OkStatus();
  }
  std::optional<size_t> bytes = ParseByteSize(text);
  if (!bytes) return bad();
  options->expert_cache_bytes = *bytes;
  return absl::OkStatus();
}

// The expert store's flags, the same on moe-cli run and moe-bench.
struct ExpertFlags {
  std::string cache;
  std::string eviction = "lru";
  std::string placement;
  std::string warmup;
  bool no_prefetch = false;
  std::string memory_limit;
  int io_threads = LoadOptions().expert_io_threads;
};

inline void AddExpertFlags(CLI::App* app, ExpertFlags* f) {
  app->add_option("--expert-cache", f->cache,
                  "read routed experts from the model file through a cache of SIZE (2GiB, "
                  "512MiB) or PERCENT of the expert bytes (25%); default: all resident, or a "
                  "cache that fits when the model does not");
  app->add_option("--expert-eviction", f->eviction, "expert cache eviction policy")
      ->check(CLI::IsMember({"lru", "lfru"}))
      ->capture_default_str();
  app->add_option("--expert-placement", f->placement,
                  "placement file (JSON): experts resident or pinned, the others cached");
  app->add_option("--expert-warmup", f->warmup,
                  "routing profile (moe-cli profile): its hottest experts are read at load");
  app->add_flag("--no-prefetch", f->no_prefetch,
                "with the expert cache, read only what steps ask for (no pre-gating)");
  app->add_option("--expert-io-threads", f->io_threads,
                  "threads reading experts from disk (a blocked read costs no CPU)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--memory-limit", f->memory_limit,
                  "the memory the model may take (SIZE); default: what the system has available");
}

inline absl::Status ApplyExpertFlags(const ExpertFlags& f, LoadOptions* options) {
  if (absl::Status s = ApplyExpertCacheFlag(f.cache, options); !s.ok()) return s;
  options->expert_eviction = f.eviction == "lfru" ? EvictionPolicy::kLfru : EvictionPolicy::kLru;
  options->expert_placement_path = f.placement;
  options->expert_warmup_path = f.warmup;
  options->expert_prefetch = !f.no_prefetch;
  options->expert_io_threads = f.io_threads;
  if (!f.memory_limit.empty()) {
    std::optional<size_t> bytes = ParseByteSize(f.memory_limit);
    if (!bytes) {
      return absl::InvalidArgumentError(absl::StrCat("--memory-limit '", f.memory_limit,
                                                     "': give a size (8GiB, 512MiB, 64MB, bytes)"));
    }
    options->memory_limit_bytes = *bytes;
  }
  return absl::OkStatus();
}

// The weight bytes the engine holds in memory: all of them, or with the expert cache the others
// plus the cache's slab.
inline size_t WeightBytesInMemory(const Engine& engine) {
  const ExpertStore* store = engine.expert_store();
  if (store == nullptr) return static_cast<size_t>(engine.params().held_bytes);
  size_t bytes = store->cache().capacity_bytes();
  for (const auto& t : engine.model()->spec().tensors) {
    if (t.expert < 0) bytes += t.data.size();
  }
  return bytes;
}

// One line for the load: where the experts are and, when cached, the budget and the I/O mode.
// When the load chose the cache for lack of memory, a line before it says why.
inline std::string ExpertPlacementLine(const Engine& engine) {
  const ExpertStore* store = engine.expert_store();
  if (store == nullptr) return "experts: resident";
  std::string why = engine.memory_note().empty() ? "" : "memory: " + engine.memory_note() + "\n";
  const double all = static_cast<double>(store->total_expert_bytes());
  const size_t budget_slots = store->budget_bytes() / store->slot_bytes();
  // The experts this store holds: not pruned ones, nor those other ranks hold.
  const size_t held = store->total_expert_bytes() / store->slot_bytes();
  std::string line =
      absl::StrCat(why, "experts: cached from disk, budget ", store->budget_bytes() / 1048576.0,
                   " MiB (", budget_slots, " of ", held, " experts, ",
                   100.0 * store->budget_bytes() / all, "% of the expert bytes");
  if (const int pinned = store->CountTier(ExpertTier::kPinned); pinned > 0) {
    absl::StrAppend(&line, ", ", pinned, " of them pinned");
  }
  absl::StrAppend(&line, ")");
  if (const int resident = store->CountTier(ExpertTier::kResident); resident > 0) {
    absl::StrAppend(&line, ", ", resident, " resident (", store->resident_bytes() / 1048576.0,
                    " MiB more)");
  }
  absl::StrAppend(&line, ", ", ExpertFileReader::ModeName(store->reader().mode()),
                  " I/O, prefetch ", store->prefetch() ? "on" : "off");
  return line;
}

}  // namespace moe::cli
