#include "tools/moe-cli/routing_trace.h"

#include <fstream>

#include "nlohmann/json.hpp"

namespace moe::cli {

absl::Status RoutingTraceRecorder::Open(const std::string& path, Session& session) {
  path_ = path;
  file_.open(path, std::ios::trunc);
  if (!file_) return absl::PermissionDeniedError("cannot write the trace to '" + path + "'");
  return session.SetRoutingCallback([this](int64_t position, int layer,
                                           absl::Span<const int32_t> experts,
                                           absl::Span<const float> weights) {
    LayerChoice c{layer, {}, {}};
    for (size_t j = 0; j < experts.size(); ++j) {
      if (experts[j] < 0) continue;
      c.experts.push_back(experts[j]);
      c.weights.push_back(weights[j]);
    }
    // A position computed again (a truncation, the last token redone) keeps its latest routing.
    std::vector<LayerChoice>& layers = by_position_[position];
    if (!layers.empty() && layers.back().layer >= layer) layers.clear();
    layers.push_back(std::move(c));
  });
}

absl::Status RoutingTraceRecorder::Finish(const Session& session) {
  std::ofstream& f = file_;
  const std::vector<int32_t>& history = session.history();
  const Tokenizer* tok = session.engine().tokenizer();
  for (const auto& [position, layers] : by_position_) {
    nlohmann::json line;
    line["position"] = position;
    if (position < static_cast<int64_t>(history.size())) {
      const int32_t id = history[position];
      line["token"] = id;
      if (tok != nullptr) {
        auto piece = tok->TokenToPiece(id);
        // Invalid UTF-8 (a byte token) goes out replaced, as JSON must carry text.
        if (piece.ok()) line["piece"] = *piece;
      }
    }
    nlohmann::json& out = line["layers"];
    out = nlohmann::json::array();
    for (const LayerChoice& c : layers) {
      out.push_back({{"layer", c.layer}, {"experts", c.experts}, {"weights", c.weights}});
    }
    f << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  f.flush();
  if (!f) return absl::DataLossError("writing the trace to '" + path_ + "' failed");
  return absl::OkStatus();
}

}  // namespace moe::cli
