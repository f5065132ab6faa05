// How often each (layer, expert) was chosen over some text: what warms the expert cache at load
// so that the first tokens do not stall on reads. Written by `moe-cli profile`, or from a
// context's expert counts (moe_context_write_routing_profile); a JSON file:
//
//   {"format": "libmoe-routing-profile", "version": 1, "n_layer": 2, "n_expert": 4,
//    "counts": [[12, 0, 3, 9], [1, 20, 0, 3]]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/moe/expert_cache.h"

namespace moe {

struct RoutingProfile {
  std::vector<std::vector<int64_t>> counts;  // [layer][expert], tokens that chose it

  // n_layer and n_expert: the model's, which the profile must match. origin names it in errors.
  static absl::StatusOr<RoutingProfile> Parse(absl::string_view json, int n_layer, int n_expert,
                                              absl::string_view origin);
  static absl::StatusOr<RoutingProfile> ReadFile(const std::string& path, int n_layer,
                                                 int n_expert);
  std::string ToJson() const;
  absl::Status WriteFile(const std::string& path) const;

  // The experts chosen at least once, the most chosen first (ties: lower layer, then expert).
  std::vector<ExpertKey> HottestFirst() const;

 private:
  // Parse, where a JSON value of the wrong type throws (Parse turns that into its error).
  static absl::StatusOr<RoutingProfile> ParseChecked(absl::string_view json, int n_layer,
                                                     int n_expert, absl::string_view origin);
};

}  // namespace moe
