#include "tools/moe-cli/stats_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/model/telemetry.h"
#include "lib/moe/routing_profile.h"
#include "nlohmann/json.hpp"
#include "tools/moe-cli/command_status.h"
#include "tools/moe-cli/heatmap.h"
#include "tools/text_tokens.h"

namespace moe::cli {
namespace {

using Counts = std::vector<std::vector<int64_t>>;

struct StatsOptions {
  std::string profile, trace, plot, title;
};

// The profile states its own shape; RoutingProfile checks the counts against it.
absl::StatusOr<Counts> FromProfile(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("n_layer") || !j.contains("n_expert") ||
      !j["n_layer"].is_number_integer() || !j["n_expert"].is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a routing profile (no n_layer and n_expert)"));
  }
  auto profile =
      RoutingProfile::Parse(*text, j["n_layer"].get<int>(), j["n_expert"].get<int>(), path);
  if (!profile.ok()) return profile.status();
  return profile->counts;
}

// Every line of a trace counts its token's experts per layer; the columns run to the highest
// expert id seen.
absl::StatusOr<Counts> FromTrace(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  Counts counts;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&] {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' line ", n, " is not a routing trace line"));
    };
    if (!j.is_object() || !j.contains("layers") || !j["layers"].is_array()) return bad();
    for (const auto& l : j["layers"]) {
      if (!l.is_object() || !l.contains("layer") || !l["layer"].is_number_integer() ||
          !l.contains("experts") || !l["experts"].is_array()) {
        return bad();
      }
      const int64_t layer = l["layer"].get<int64_t>();
      if (layer < 0 || layer > 4096) return bad();
      if (counts.size() <= static_cast<size_t>(layer)) counts.resize(layer + 1);
      for (const auto& e : l["experts"]) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > (1 << 20)) {
          return bad();
        }
        std::vector<int64_t>& row = counts[layer];
        const size_t id = e.get<size_t>();
        if (row.size() <= id) row.resize(id + 1, 0);
        ++row[id];
      }
    }
  }
  size_t n_expert = 0;
  for (const auto& row : counts) n_expert = std::max(n_expert, row.size());
  for (auto& row : counts) row.resize(n_expert, 0);
  return counts;
}

absl::Status Run(const StatsOptions& o) {
  if (o.profile.empty() == o.trace.empty()) {
    return absl::InvalidArgumentError("give exactly one of --profile FILE or --trace FILE");
  }
  auto counts = o.profile.empty() ? FromTrace(o.trace) : FromProfile(o.profile);
  if (!counts.ok()) return counts.status();
  std::printf("layer  choices  fairness  top expert (share)\n");
  for (size_t l = 0; l < counts->size(); ++l) {
    const std::vector<int64_t>& row = (*counts)[l];
    const ExpertUtilisation u = UtilisationOf(row);
    if (u.choices == 0) {
      std::printf("%5zu  %7d  (no routed tokens)\n", l, 0);
      continue;
    }
    const size_t best = std::max_element(row.begin(), row.end()) - row.begin();
    std::printf("%5zu  %7.0f  %8.3f  %zu (%.1f%%)\n", l, u.choices, u.jain_fairness, best,
                100.0 * static_cast<double>(row[best]) / u.choices);
  }
  if (o.plot.empty()) return absl::OkStatus();
  const std::string title =
      !o.title.empty() ? o.title : absl::StrCat("expert utilisation: ", o.profile + o.trace);
  if (absl::Status s = DrawUtilisationHeatmap(*counts, title, o.plot); !s.ok()) return s;
  std::fprintf(stderr, "wrote %s (%zu layers x %zu experts)\n", o.plot.c_str(), counts->size(),
               counts->empty() ? size_t{0} : counts->front().size());
  return absl::OkStatus();
}

}  // namespace

void AddStatsCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<StatsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "stats", "expert utilisation per layer from a routing profile or trace; --plot draws it");
  cmd->add_option("--profile", opts->profile,
                  "routing profile (moe-cli profile, moe_context_write_routing_profile)");
  cmd->add_option("--trace", opts->trace, "routing trace (moe-cli run --trace)");
  cmd->add_option("--plot", opts->plot, "heatmap to write: layers x experts, .png or .svg");
  cmd->add_option("--title", opts->title, "the heatmap's title");
  cmd->callback([opts, exit_code] { ReportStatus("stats", Run(*opts), exit_code); });
}

}  // namespace moe::cli
