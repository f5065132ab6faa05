#include "lib/runtime/metrics_text.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moe {
namespace {

// One metric family at a time: HELP and TYPE lines, then its samples.
class Writer {
 public:
  explicit Writer(std::string labels) : labels_(std::move(labels)) {}

  void Family(const char* name, const char* type, const char* help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
    name_ = name;
  }
  // A sample of the current family; `label` is one more `key="value"` pair, or empty.
  void Sample(double value, const std::string& label = "") {
    std::string all = labels_;
    if (!label.empty()) absl::StrAppend(&all, all.empty() ? "" : ",", label);
    absl::StrAppend(&out_, name_, all.empty() ? "" : absl::StrCat("{", all, "}"), " ",
                    Number(value), "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  // Prometheus spells the non-finite values NaN, +Inf and -Inf.
  static std::string Number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    return absl::StrFormat("%.10g", v);
  }

  std::string labels_, out_;
  const char* name_ = "";
};

double PerSecond(int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; }

// The expert choices the routing policies changed, by action.
void PolicyChoices(Writer& w, const char* name, const char* type, const char* when,
                   int64_t rerouted, int64_t dropped, int64_t reweighted) {
  const std::string help =
      absl::StrCat("Expert choices the routing policies changed ", when,
                   ": moved to a later expert or dropped by a capacity, or weighted down by load.");
  w.Family(name, type, help.c_str());
  w.Sample(static_cast<double>(rerouted), "action=\"rerouted\"");
  w.Sample(static_cast<double>(dropped), "action=\"dropped\"");
  w.Sample(static_cast<double>(reweighted), "action=\"reweighted\"");
}

// A pool of the engine's cache (blocks or slots) by state: in use, cached for prefixes, free.
void PoolByState(Writer& w, const char* name, const char* help, int64_t total, int64_t in_use,
                 int64_t cached) {
  w.Family(name, "gauge", help);
  w.Sample(static_cast<double>(in_use), "state=\"in_use\"");
  w.Sample(static_cast<double>(cached), "state=\"cached\"");
  w.Sample(static_cast<double>(total - in_use - cached), "state=\"free\"");
}

}  // namespace

std::string MetricsText(const SessionStats& s, const Engine& engine, const std::string& labels) {
  const double total_params = static_cast<double>(engine.params().total);
  Writer w(labels);
  const Telemetry& t = s.forward;
  w.Family("moe_call_tokens", "gauge", "Tokens of the last call, by phase.");
  w.Sample(static_cast<double>(s.prompt_tokens), "phase=\"prompt\"");
  w.Sample(static_cast<double>(s.generated_tokens), "phase=\"generate\"");
  w.Family("moe_call_tokens_per_second", "gauge", "Tokens per second of the last call, by phase.");
  w.Sample(PerSecond(s.prompt_tokens, s.prompt_s), "phase=\"prompt\"");
  w.Sample(PerSecond(s.generated_tokens, s.generate_s), "phase=\"generate\"");
  w.Family("moe_call_stage_seconds", "gauge", "Time per stage in the last call.");
  w.Sample(t.time.attention_s, "stage=\"attention\"");
  w.Sample(t.time.router_s, "stage=\"router\"");
  w.Sample(t.time.experts_s, "stage=\"experts\"");
  w.Sample(t.time.head_s, "stage=\"head\"");
  w.Sample(t.time.other_s, "stage=\"other\"");
  w.Sample(s.sample_s, "stage=\"sampling\"");
  w.Family("moe_router_entropy_nats", "gauge",
           "Mean entropy of the router's scores per token and layer in the last call.");
  w.Sample(t.MeanRouterEntropy());
  w.Family("moe_experts_per_token", "gauge",
           "Routed experts a token ran per MoE layer in the last call (the model's top-k unless "
           "a routing policy drops some).");
  w.Sample(t.MeanExpertsPerToken());
  PolicyChoices(w, "moe_routing_policy_choices", "gauge",
                "in the last call, over tokens and layers", t.rerouted_choices, t.dropped_choices,
                t.reweighted_choices);
  const double tokens = static_cast<double>(t.tokens);
  // As moe_stats counts them: every parameter but the routed experts a token did not choose.
  const double active = tokens > 0 ? engine.ActiveParamsPerToken(t) : 0.0;
  w.Family("moe_active_params_per_token", "gauge",
           "Parameters a token touched in the last call: the dense ones (embedding matrix "
           "included) and those of the routed experts that fired.");
  w.Sample(active);
  w.Family("moe_active_fraction", "gauge", "Active parameters per token over all parameters.");
  w.Sample(total_params > 0 ? active / total_params : 0.0);
  w.Family("moe_weight_bytes_per_token", "gauge", "Weight bytes read per token in the last call.");
  w.Sample(tokens > 0 ? static_cast<double>(t.weight_bytes_read) / tokens : 0.0);
  w.Family("moe_token_weight_bytes", "gauge",
           "Weight bytes a token's computation touched in the last call, on average (dense "
           "matrices, its routed experts, the head where logits were computed).");
  w.Sample(tokens > 0 ? static_cast<double>(t.active_weight_bytes) / tokens : 0.0);
  w.Family("moe_token_multiply_adds", "gauge",
           "Multiply-adds of a token's matrix products and attention in the last call, on "
           "average.");
  w.Sample(tokens > 0 ? static_cast<double>(t.multiply_adds) / tokens : 0.0);
  w.Family("moe_expert_utilisation_stddev", "gauge",
           "Per layer: standard deviation of the experts' shares of the tokens' choices in the "
           "last call (0: all chosen alike).");
  std::vector<ExpertUtilisation> layers;
  for (const auto& counts : t.expert_counts) layers.push_back(UtilisationOf(counts));
  for (size_t l = 0; l < layers.size(); ++l) {
    w.Sample(layers[l].share_stddev, absl::StrCat("layer=\"", l, "\""));
  }
  w.Family("moe_expert_jain_fairness", "gauge",
           "Per layer: Jain's fairness index of the experts' token counts in the last call (1: "
           "all chosen alike; 1/n: one expert takes everything; 0: no routed tokens).");
  for (size_t l = 0; l < layers.size(); ++l) {
    w.Sample(layers[l].jain_fairness, absl::StrCat("layer=\"", l, "\""));
  }
  const ExpertCacheStats& c = s.expert_cache;
  w.Family("moe_expert_cache_lookups", "gauge",
           "The expert cache's lookups in the last call, by result (0 when experts are resident).");
  w.Sample(static_cast<double>(c.hits), "result=\"hit\"");
  w.Sample(static_cast<double>(c.misses), "result=\"miss\"");
  w.Family("moe_expert_cache_hit_ratio", "gauge",
           "Hits over lookups of the expert cache in the last call (1 when experts are resident).");
  const int64_t lookups = c.hits + c.misses;
  w.Sample(lookups > 0 ? static_cast<double>(c.hits) / static_cast<double>(lookups) : 1.0);
  return w.Take();
}

std::string EngineMetricsText(const BatchEngineStats& s, const std::string& labels) {
  Writer w(labels);
  auto counter = [&](const char* name, const char* help, int64_t v) {
    w.Family(name, "counter", help);
    w.Sample(static_cast<double>(v));
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    w.Family(name, "gauge", help);
    w.Sample(v);
  };
  counter("moe_engine_requests_submitted_total", "Requests submitted to the engine.", s.submitted);
  counter("moe_engine_requests_finished_total", "Requests the engine finished, in any way.",
          s.finished);
  counter("moe_engine_steps_total", "Steps the engine ran.", s.steps);
  counter("moe_engine_tokens_total", "Tokens the steps computed, prompt and decode.", s.tokens);
  counter("moe_engine_decode_tokens_total", "Of those, one per generating request and step.",
          s.decode_tokens);
  counter("moe_engine_prefix_tokens_reused_total",
          "Prompt positions taken from KV blocks an earlier request computed.",
          s.prefix_tokens_reused);
  counter("moe_engine_preemptions_total", "Requests set aside to be computed again later.",
          s.preemptions);
  gauge("moe_engine_step_seconds_total", "Time spent in steps.", s.step_s);
  PolicyChoices(w, "moe_engine_routing_policy_choices_total", "counter", "over every step",
                s.rerouted_choices, s.dropped_choices, s.reweighted_choices);
  w.Family("moe_engine_requests", "gauge", "Requests now, by state.");
  w.Sample(static_cast<double>(s.running), "state=\"running\"");
  w.Sample(static_cast<double>(s.waiting), "state=\"waiting\"");
  PoolByState(w, "moe_engine_kv_blocks", "The paged KV cache's blocks, by state.", s.kv_blocks,
              s.kv_blocks_in_use, s.kv_blocks_cached);
  if (s.kv_window_blocks > 0) {
    PoolByState(w, "moe_engine_kv_window_blocks",
                "The blocks of the sliding-window layers, which hold only each request's window, "
                "by state.",
                s.kv_window_blocks, s.kv_window_blocks_in_use, s.kv_window_blocks_cached);
  }
  if (s.kv_state_slots > 0) {
    PoolByState(w, "moe_engine_kv_state_slots",
                "The slots of the convolution layers (their last rows and recurrent state), by "
                "state.",
                s.kv_state_slots, s.kv_state_slots_in_use, s.kv_state_slots_cached);
  }
  gauge("moe_engine_kv_bytes", "The paged KV cache's memory in bytes.",
        static_cast<double>(s.kv_bytes));
  gauge("moe_engine_kv_block_positions", "Positions per KV block.", s.block_size);
  gauge("moe_engine_sequences_per_step", "Mean requests a step ran.", s.mean_sequences_per_step);
  gauge("moe_engine_tokens_per_step", "Mean tokens a step computed.", s.mean_tokens_per_step);
  gauge("moe_engine_experts_per_step", "Mean distinct experts a step ran, per MoE layer.",
        s.mean_experts_per_step);
  return w.Take();
}

}  // namespace moe
