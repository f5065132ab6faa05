#include "lib/moe/routing_profile.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/json_text.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

constexpr char kFormat[] = "libmoe-routing-profile";

absl::Status Bad(absl::string_view origin, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("routing profile '", origin, "': ", what));
}

}  // namespace

absl::StatusOr<RoutingProfile> RoutingProfile::Parse(absl::string_view json, int n_layer,
                                                     int n_expert, absl::string_view origin) {
  try {
    return ParseChecked(json, n_layer, n_expert, origin);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    return Bad(origin, e.what());
  }
}

absl::StatusOr<RoutingProfile> RoutingProfile::ParseChecked(absl::string_view json, int n_layer,
                                                            int n_expert,
                                                            absl::string_view origin) {
  using Json = nlohmann::json;
  auto parsed = ParseJsonText(json);
  if (!parsed.ok()) return Bad(origin, parsed.status().message());
  Json doc = *std::move(parsed);
  if (!doc.is_object() || doc.value("format", "") != kFormat) {
    return Bad(origin, absl::StrCat("not a routing profile (\"format\": \"", kFormat, "\")"));
  }
  if (!doc.contains("version") || doc["version"] != 1) {
    return Bad(origin, "version is not 1 (written by a newer libmoe?)");
  }
  if (doc.value("n_layer", -1) != n_layer || doc.value("n_expert", -1) != n_expert) {
    return Bad(origin, absl::StrCat("it is for ", doc.value("n_layer", -1), " layers of ",
                                    doc.value("n_expert", -1), " experts, the model has ", n_layer,
                                    " of ", n_expert));
  }
  const Json& counts = doc["counts"];
  if (!counts.is_array() || counts.size() != static_cast<size_t>(n_layer)) {
    return Bad(origin, absl::StrCat("\"counts\" is not ", n_layer, " rows"));
  }
  RoutingProfile p;
  for (size_t l = 0; l < counts.size(); ++l) {
    const Json& row = counts[l];
    if (!row.is_array() || row.size() != static_cast<size_t>(n_expert)) {
      return Bad(origin, absl::StrCat("row ", l, " of \"counts\" is not ", n_expert, " counts"));
    }
    std::vector<int64_t>& out = p.counts.emplace_back();
    for (const Json& c : row) {
      if (!c.is_number_integer() || c.get<int64_t>() < 0) {
        return Bad(origin, absl::StrCat("row ", l, ": ", c.dump(), " is not a count"));
      }
      out.push_back(c.get<int64_t>());
    }
  }
  return p;
}

absl::StatusOr<RoutingProfile> RoutingProfile::ReadFile(const std::string& path, int n_layer,
                                                        int n_expert) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open routing profile '", path, "'"));
  std::stringstream text;
  text << f.rdbuf();
  return Parse(text.str(), n_layer, n_expert, path);
}

std::string RoutingProfile::ToJson() const {
  nlohmann::json doc = {{"format", kFormat},
                        {"version", 1},
                        {"n_layer", counts.size()},
                        {"n_expert", counts.empty() ? 0 : counts[0].size()},
                        {"counts", counts}};
  return doc.dump() + "\n";
}

absl::Status RoutingProfile::WriteFile(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  f << ToJson();
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("writing '", path, "' failed"));
  return absl::OkStatus();
}

std::vector<ExpertKey> RoutingProfile::HottestFirst() const {
  std::vector<ExpertKey> keys;
  for (size_t l = 0; l < counts.size(); ++l) {
    for (size_t e = 0; e < counts[l].size(); ++e) {
      if (counts[l][e] > 0) keys.push_back({static_cast<int32_t>(l), static_cast<int32_t>(e)});
    }
  }
  std::stable_sort(keys.begin(), keys.end(), [&](ExpertKey a, ExpertKey b) {
    return counts[a.layer][a.expert] > counts[b.layer][b.expert];
  });
  return keys;
}

}  // namespace moe
