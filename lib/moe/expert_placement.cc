#include "lib/moe/expert_placement.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/json_text.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using Json = nlohmann::json;

absl::Status Bad(absl::string_view origin, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("placement file '", origin, "': ", what));
}

}  // namespace

const char* ExpertTierName(ExpertTier tier) {
  switch (tier) {
    case ExpertTier::kResident:
      return "resident";
    case ExpertTier::kCached:
      return "cached";
    case ExpertTier::kPinned:
      return "pinned";
  }
  return "unknown";
}

ExpertPlacement::ExpertPlacement(int n_layer, int n_expert)
    : tiers_(n_layer, std::vector<ExpertTier>(n_expert, ExpertTier::kCached)) {}

int ExpertPlacement::Count(ExpertTier tier) const {
  int n = 0;
  for (const auto& layer : tiers_) {
    for (ExpertTier t : layer) n += t == tier;
  }
  return n;
}

absl::StatusOr<ExpertPlacement> ExpertPlacement::Parse(absl::string_view json, int n_layer,
                                                       int n_expert, absl::string_view origin) {
  auto parsed = ParseJsonText(json);
  if (!parsed.ok()) return Bad(origin, parsed.status().message());
  Json doc = *std::move(parsed);
  if (!doc.is_object()) return Bad(origin, "the top level is not an object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "layers") return Bad(origin, absl::StrCat("unknown key \"", key, "\""));
  }
  ExpertPlacement placement(n_layer, n_expert);
  auto it = doc.find("layers");
  if (it == doc.end()) return placement;
  if (!it->is_object()) return Bad(origin, "\"layers\" is not an object");
  // Who named each expert, so that a second mention is an error rather than a silent override.
  std::vector<std::vector<std::string>> named(n_layer, std::vector<std::string>(n_expert));
  for (const auto& [layer_key, tiers] : it->items()) {
    int first = 0, last = n_layer - 1;
    if (layer_key != "*") {
      int layer;
      if (!absl::SimpleAtoi(layer_key, &layer) || layer < 0 || layer >= n_layer) {
        return Bad(origin, absl::StrCat("layer \"", layer_key, "\" is not a layer index in [0, ",
                                        n_layer, ") or \"*\""));
      }
      first = last = layer;
    }
    if (!tiers.is_object()) {
      return Bad(origin, absl::StrCat("layer \"", layer_key, "\" is not an object of tiers"));
    }
    for (const auto& [tier_name, experts] : tiers.items()) {
      ExpertTier tier;
      if (tier_name == "resident") {
        tier = ExpertTier::kResident;
      } else if (tier_name == "pinned") {
        tier = ExpertTier::kPinned;
      } else if (tier_name == "cached") {
        tier = ExpertTier::kCached;
      } else {
        return Bad(origin, absl::StrCat("layer \"", layer_key, "\": unknown tier \"", tier_name,
                                        "\" (resident, pinned or cached)"));
      }
      if (!experts.is_array()) {
        return Bad(origin, absl::StrCat("layer \"", layer_key, "\", \"", tier_name,
                                        "\": not an array of expert indices"));
      }
      for (const Json& e : experts) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= n_expert) {
          return Bad(origin,
                     absl::StrCat("layer \"", layer_key, "\", \"", tier_name, "\": ", e.dump(),
                                  " is not an expert index in [0, ", n_expert, ")"));
        }
        const int expert = static_cast<int>(e.get<int64_t>());
        for (int l = first; l <= last; ++l) {
          std::string& by = named[l][expert];
          if (!by.empty()) {
            return Bad(origin, absl::StrCat("expert ", expert, " of layer ", l,
                                            " is placed twice (layer \"", by, "\" and \"",
                                            layer_key, "\")"));
          }
          by = layer_key;
          placement.tiers_[l][expert] = tier;
        }
      }
    }
  }
  return placement;
}

absl::StatusOr<ExpertPlacement> ExpertPlacement::ReadFile(const std::string& path, int n_layer,
                                                          int n_expert) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open placement file '", path, "'"));
  std::stringstream text;
  text << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("reading placement file '", path, "'"));
  return Parse(text.str(), n_layer, n_expert, path);
}

}  // namespace moe
