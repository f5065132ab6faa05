#include "tools/moe-cli/stats_report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace moe::cli {
namespace {

double PerSecond(int64_t n, double s) { return s > 0 ? n / s : 0; }

const char* FinishName(FinishReason r) {
  switch (r) {
    case FinishReason::kEndOfGeneration:
      return "eog";
    case FinishReason::kMaxTokens:
      return "max_tokens";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kCallback:
      return "callback";
    case FinishReason::kContextFull:
      return "context_full";
    default:
      return "none";
  }
}

}  // namespace

std::string StatsTable(const Engine& e, const SessionStats& s) {
  const Telemetry& t = s.forward;
  std::string out;
  absl::StrAppendFormat(&out, "\nprompt      %6d tokens  %8.1f tok/s\n", s.prompt_tokens,
                        PerSecond(s.prompt_tokens, s.prompt_s));
  absl::StrAppendFormat(&out, "generation  %6d tokens  %8.1f tok/s  (finish: %s)\n",
                        s.generated_tokens, PerSecond(s.generated_tokens, s.generate_s),
                        FinishName(s.finish));
  absl::StrAppendFormat(
      &out,
      "time        attention %.3fs  router %.3fs  experts %.3fs  head %.3fs  sampling %.3fs\n",
      t.time.attention_s, t.time.router_s, t.time.experts_s, t.time.head_s, s.sample_s);
  double active = e.ActiveParamsPerToken(t);
  absl::StrAppendFormat(&out, "active      %.0f of %d parameters per token = %.2f%%\n", active,
                        e.params().total, 100.0 * active / std::max<int64_t>(1, e.params().total));
  if (t.tokens > 0) {
    absl::StrAppendFormat(&out, "router      mean entropy %.3f nats per token and layer\n",
                          t.MeanRouterEntropy());
    const double n = static_cast<double>(t.tokens);
    absl::StrAppendFormat(&out,
                          "cost        %.2f MB of weights and %.2f M multiply-adds per token\n",
                          t.active_weight_bytes / n / 1e6, t.multiply_adds / n / 1e6);
  }
  if (t.exchange_bytes > 0 && t.tokens > 0) {
    absl::StrAppendFormat(&out,
                          "exchange    %.1f KB per token with the other ranks (expert outputs, and "
                          "layer inputs when the dense weights are on rank 0 only), "
                          "%.3fs in exchanges (waits included)\n",
                          t.exchange_bytes / static_cast<double>(t.tokens) / 1e3, t.exchange_s);
  }
  if (const ExpertStore* store = e.expert_store()) {
    const ExpertCacheStats c = store->cache().stats();
    absl::StrAppendFormat(
        &out,
        "expert cache %d hits, %d misses (hit rate %.1f%%), %d evictions, %.1f MiB read in "
        "%.3fs (%s I/O), compute waited %.3fs; %d read ahead, %d of them used, %.1f MiB "
        "unused; guesses named %.0f%% of the experts used (since load)\n",
        c.hits, c.misses, 100.0 * c.hits / std::max<int64_t>(1, c.hits + c.misses), c.evictions,
        c.bytes_loaded / 1048576.0, c.load_seconds,
        ExpertFileReader::ModeName(store->reader().mode()), c.wait_seconds, c.prefetches,
        c.prefetch_hits, c.prefetch_wasted_bytes / 1048576.0,
        100.0 * c.predicted_right / std::max<int64_t>(1, c.predicted));
    out += "  layer   hits  misses  MiB read  wait s  ahead  used  guessed  in memory\n";
    const std::vector<ExpertCacheStats> layers = store->cache().layer_stats();
    for (size_t l = 0; l < layers.size(); ++l) {
      const ExpertCacheStats& x = layers[l];
      const int in_memory = store->ExpertsInMemory(static_cast<int>(l));
      absl::StrAppendFormat(
          &out, "  %-5d %6d %7d %9.1f %7.3f %6d %5d %7.0f%% %10d\n", l, x.hits, x.misses,
          x.bytes_loaded / 1048576.0, x.wait_seconds, x.prefetches, x.prefetch_hits,
          100.0 * x.predicted_right / std::max<int64_t>(1, x.predicted), in_memory);
    }
  }
  out += "experts     share of routed tokens per expert (%), one row per layer\n";
  for (size_t l = 0; l < t.expert_counts.size(); ++l) {
    int64_t sum = 0;
    for (int64_t c : t.expert_counts[l]) sum += c;
    absl::StrAppendFormat(&out, "  layer %-3d", l);
    for (int64_t c : t.expert_counts[l]) {
      absl::StrAppendFormat(&out, " %5.1f", sum ? 100.0 * c / sum : 0.0);
    }
    out += "\n";
  }
  return out;
}

std::string StatsJson(const Engine& e, const SessionStats& s, const std::string& text,
                      const std::vector<int32_t>& tokens) {
  const Telemetry& t = s.forward;
  nlohmann::json j;
  j["text"] = text;
  j["tokens"] = tokens;
  j["finish"] = FinishName(s.finish);
  j["prompt_tokens"] = s.prompt_tokens;
  j["generated_tokens"] = s.generated_tokens;
  j["prompt_tokens_per_s"] = PerSecond(s.prompt_tokens, s.prompt_s);
  j["generation_tokens_per_s"] = PerSecond(s.generated_tokens, s.generate_s);
  j["time_s"] = {{"attention", t.time.attention_s}, {"router", t.time.router_s},
                 {"experts", t.time.experts_s},     {"head", t.time.head_s},
                 {"sampling", s.sample_s},          {"prompt", s.prompt_s},
                 {"generation", s.generate_s}};
  double active = e.ActiveParamsPerToken(t);
  j["total_params"] = e.params().total;
  j["active_params_per_token"] = active;
  j["active_fraction"] = active / std::max<int64_t>(1, e.params().total);
  j["weight_bytes_read"] = t.weight_bytes_read;
  if (t.tokens > 0) {
    j["weight_bytes_per_token"] = static_cast<double>(t.active_weight_bytes) / t.tokens;
    j["multiply_adds_per_token"] = static_cast<double>(t.multiply_adds) / t.tokens;
  }
  j["expert_counts"] = t.expert_counts;
  if (t.exchange_bytes > 0) {
    j["exchange_bytes"] = t.exchange_bytes;
    j["exchange_seconds"] = t.exchange_s;
  }
  if (const ExpertStore* store = e.expert_store()) {
    const ExpertCacheStats c = store->cache().stats();
    auto figures = [](const ExpertCacheStats& x) {
      return nlohmann::json{{"hits", x.hits},
                            {"misses", x.misses},
                            {"evictions", x.evictions},
                            {"bytes_read", x.bytes_loaded},
                            {"read_s", x.load_seconds},
                            {"wait_s", x.wait_seconds},
                            {"prefetches", x.prefetches},
                            {"prefetch_hits", x.prefetch_hits},
                            {"prefetch_wasted_bytes", x.prefetch_wasted_bytes},
                            {"predicted", x.predicted},
                            {"predicted_right", x.predicted_right}};
    };
    nlohmann::json cache = figures(c);
    cache["budget_bytes"] = store->budget_bytes();
    cache["resident_bytes"] = store->resident_bytes();
    cache["slots"] = store->cache().slot_count();
    cache["io"] = ExpertFileReader::ModeName(store->reader().mode());
    cache["prefetch"] = store->prefetch();
    cache["layers"] = nlohmann::json::array();
    for (const ExpertCacheStats& x : store->cache().layer_stats())
      cache["layers"].push_back(figures(x));
    j["expert_cache"] = cache;
  }
  return j.dump();
}

}  // namespace moe::cli
