#include "lib/model/telemetry.h"

#include <cmath>

#include <cstddef>

namespace moe {

void Telemetry::Reset(int64_t n_layer, int64_t n_expert) {
  const bool record = record_routing;
  *this = Telemetry();
  record_routing = record;
  expert_counts.assign(n_layer, std::vector<int64_t>(n_expert, 0));
  if (record_routing) routing_trace.assign(n_layer, {});
}

double Telemetry::MeanExpertsPerToken() const {
  int64_t chosen = 0, routed_layers = 0;
  for (const auto& layer : expert_counts) {
    int64_t in_layer = 0;
    for (int64_t c : layer) in_layer += c;
    chosen += in_layer;
    routed_layers += in_layer > 0;
  }
  return tokens > 0 && routed_layers > 0
             ? static_cast<double>(chosen) / static_cast<double>(tokens * routed_layers)
             : 0.0;
}

double Telemetry::MeanRouterEntropy() const {
  if (tokens == 0) return 0;
  const size_t layers = expert_counts.empty() ? 1 : expert_counts.size();
  return router_entropy_sum / (static_cast<double>(tokens) * layers);
}

void Telemetry::Merge(const Telemetry& o) {
  if (expert_counts.empty())
    expert_counts = o.expert_counts;
  else {
    for (size_t l = 0; l < expert_counts.size() && l < o.expert_counts.size(); ++l) {
      for (size_t e = 0; e < expert_counts[l].size() && e < o.expert_counts[l].size(); ++e) {
        expert_counts[l][e] += o.expert_counts[l][e];
      }
    }
  }
  if (routing_trace.size() < o.routing_trace.size()) routing_trace.resize(o.routing_trace.size());
  for (size_t l = 0; l < o.routing_trace.size(); ++l) {
    routing_trace[l].insert(routing_trace[l].end(), o.routing_trace[l].begin(),
                            o.routing_trace[l].end());
  }
  tokens += o.tokens;
  weight_bytes_read += o.weight_bytes_read;
  active_params += o.active_params;
  router_entropy_sum += o.router_entropy_sum;
  rerouted_choices += o.rerouted_choices;
  dropped_choices += o.dropped_choices;
  reweighted_choices += o.reweighted_choices;
  active_weight_bytes += o.active_weight_bytes;
  multiply_adds += o.multiply_adds;
  exchange_bytes += o.exchange_bytes;
  exchange_s += o.exchange_s;
  time += o.time;
}

StageTimes& StageTimes::operator+=(const StageTimes& o) {
  attention_s += o.attention_s;
  router_s += o.router_s;
  experts_s += o.experts_s;
  head_s += o.head_s;
  other_s += o.other_s;
  return *this;
}

ExpertUtilisation UtilisationOf(absl::Span<const int64_t> counts) {
  ExpertUtilisation u;
  double squares = 0;
  for (int64_t c : counts) {
    u.choices += static_cast<double>(c);
    squares += static_cast<double>(c) * static_cast<double>(c);
  }
  const double n = static_cast<double>(counts.size());
  if (u.choices == 0 || n == 0) return u;
  double var = 0;
  for (int64_t c : counts) {
    const double d = static_cast<double>(c) / u.choices - 1.0 / n;
    var += d * d;
  }
  u.share_stddev = std::sqrt(var / n);
  u.jain_fairness = u.choices * u.choices / (n * squares);
  return u;
}

}  // namespace moe
