// moe-cli run --trace FILE.jsonl: every token the context processed, one JSON line each — its
// position, id, text piece, and per MoE layer the experts it ran and their weights — gathered
// from the session's routing callback.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/runtime/session.h"

namespace moe::cli {

class RoutingTraceRecorder {
 public:
  // Creates the file (so a path that cannot be written fails before any work) and starts
  // recording what `session` routes from its next call on.
  absl::Status Open(const std::string& path, Session& session);
  // One line per recorded position, in order: {"position", "token", "piece", "layers": [{"layer",
  // "experts", "weights"}]}; experts a token did not run (-1) are left out.
  absl::Status Finish(const Session& session);

 private:
  struct LayerChoice {
    int layer;
    std::vector<int32_t> experts;
    std::vector<float> weights;
  };
  std::string path_;
  std::ofstream file_;
  std::map<int64_t, std::vector<LayerChoice>> by_position_;
};

}  // namespace moe::cli
