// Where each routed expert lives, as data: resident (read at load, always in memory, outside the
// cache's budget), cached (read from the model file into the expert cache when a step needs it,
// evicted by policy) or pinned (in the cache, read at load, never evicted). A later GPU device
// or remote rank is one more tier of the same description.
//
// A placement file says which experts are not simply cached (JSON, every layer and expert
// index checked against the model):
//
//   {"layers": {"0": {"resident": [3, 7], "pinned": [1]},
//               "*": {"pinned": [0]}}}            // "*": every layer
//
// Experts a file does not name are cached. An expert named twice, an index out of range, an
// unknown key or tier, or malformed JSON is an error that names the file and the place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe {

enum class ExpertTier : int32_t { kResident = 0, kCached = 1, kPinned = 2 };

const char* ExpertTierName(ExpertTier tier);

class ExpertPlacement {
 public:
  // Every expert cached.
  ExpertPlacement(int n_layer, int n_expert);

  // origin names the text in errors (the file's path).
  static absl::StatusOr<ExpertPlacement> Parse(absl::string_view json, int n_layer, int n_expert,
                                               absl::string_view origin);
  static absl::StatusOr<ExpertPlacement> ReadFile(const std::string& path, int n_layer,
                                                  int n_expert);

  ExpertTier tier(int layer, int expert) const { return tiers_[layer][expert]; }
  void set_tier(int layer, int expert, ExpertTier tier) { tiers_[layer][expert] = tier; }
  int n_layer() const { return static_cast<int>(tiers_.size()); }
  int n_expert() const { return tiers_.empty() ? 0 : static_cast<int>(tiers_[0].size()); }
  int Count(ExpertTier tier) const;

 private:
  std::vector<std::vector<ExpertTier>> tiers_;  // [layer][expert]
};

}  // namespace moe
