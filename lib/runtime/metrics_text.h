// A context's statistics in the Prometheus text exposition format (version 0.0.4), so that a
// service embedding libmoe serves them from its own /metrics endpoint: the last call's tokens,
// speed and time per stage, the router's entropy, each layer's expert utilisation (standard
// deviation of the experts' shares and Jain's fairness index), active parameters and weight
// bytes per token, routed experts per token, what the routing policies changed, a token's cost,
// and the expert cache's hits, misses and hit ratio.
#pragma once

#include <string>

#include "lib/runtime/batch_engine.h"
#include "lib/runtime/session.h"

namespace moe {

// `engine`: the context's, for its parameter counts. Every sample is labelled with `labels` as
// well (`key="value"` pairs, comma-separated, already escaped; empty: none).
std::string MetricsText(const SessionStats& stats, const Engine& engine,
                        const std::string& labels = "");

// A batching engine's statistics since it was created: requests and tokens as counters (the
// _total families), what runs now and the KV blocks as gauges, step averages.
std::string EngineMetricsText(const BatchEngineStats& stats, const std::string& labels = "");

}  // namespace moe
