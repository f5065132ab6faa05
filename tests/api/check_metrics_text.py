#!/usr/bin/env python3
"""Parses moe_context_metrics_text output with the Prometheus client library's own parser (the
reference for the text exposition format) and checks what libmoe promises to put in it.

  check_metrics_text.py FILE N_LAYERS TOP_K     (a context's)
  check_metrics_text.py FILE engine              (an engine's)
Exit 0 when the text parses and holds every family with sane values; 77 when the parser is not
installed (CTest's skip code); 1 otherwise, saying why."""
import math
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIP: python3-prometheus-client is not installed (scripts/install-deps.sh installs it)")
    sys.exit(77)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def parse(path):
    text = open(path, encoding="utf-8").read()
    try:
        return {f.name: f for f in text_string_to_metric_families(text)}
    except Exception as e:  # the parser's word on a malformed exposition
        fail(f"the text does not parse: {e}")


def check_engine(families):
    # The parser names a counter family without its _total suffix.
    counters = ["moe_engine_requests_submitted", "moe_engine_requests_finished", "moe_engine_steps",
                "moe_engine_tokens", "moe_engine_decode_tokens", "moe_engine_prefix_tokens_reused",
                "moe_engine_preemptions"]
    for name in counters:
        if name not in families or families[name].type != "counter":
            fail(f"no counter {name}_total")
    for name, label, values, kind in [
            ("moe_engine_requests", "state", {"running", "waiting"}, "gauge"),
            ("moe_engine_kv_blocks", "state", {"in_use", "cached", "free"}, "gauge"),
            ("moe_engine_routing_policy_choices", "action", {"rerouted", "dropped", "reweighted"},
             "counter")]:
        if name not in families or families[name].type != kind:
            fail(f"no {kind} {name}")
        got = {s.labels.get(label) for s in families[name].samples}
        if got != values:
            fail(f"{name} has {label} values {sorted(got)}, want {sorted(values)}")
    for f in families.values():
        for s in f.samples:
            if not math.isfinite(s.value) or s.value < 0:
                fail(f"{f.name}{s.labels} = {s.value}")
    value = lambda name: families[name].samples[0].value
    if value("moe_engine_requests_finished") < 1 or value("moe_engine_tokens") < 1:
        fail("the engine's finished requests and tokens are not counted")
    print(f"ok: {len(families)} families")


def main():
    path = sys.argv[1]
    families = parse(path)
    if sys.argv[2] == "engine":
        return check_engine(families)
    n_layers, top_k = int(sys.argv[2]), float(sys.argv[3])
    want = {
        "moe_call_tokens": ("phase", {"prompt", "generate"}),
        "moe_call_tokens_per_second": ("phase", {"prompt", "generate"}),
        "moe_call_stage_seconds": ("stage", {"attention", "router", "experts", "head", "other", "sampling"}),
        "moe_router_entropy_nats": (None, None),
        "moe_experts_per_token": (None, None),
        "moe_routing_policy_choices": ("action", {"rerouted", "dropped", "reweighted"}),
        "moe_active_params_per_token": (None, None),
        "moe_active_fraction": (None, None),
        "moe_weight_bytes_per_token": (None, None),
        "moe_token_weight_bytes": (None, None),
        "moe_token_multiply_adds": (None, None),
        "moe_expert_utilisation_stddev": ("layer", {str(l) for l in range(n_layers)}),
        "moe_expert_jain_fairness": ("layer", {str(l) for l in range(n_layers)}),
        "moe_expert_cache_lookups": ("result", {"hit", "miss"}),
        "moe_expert_cache_hit_ratio": (None, None),
    }
    for name, (label, values) in want.items():
        if name not in families:
            fail(f"no family {name}")
        f = families[name]
        if f.type != "gauge":
            fail(f"{name} is a {f.type}, not a gauge")
        if not f.documentation:
            fail(f"{name} has no HELP text")
        got = {s.labels.get(label) for s in f.samples} if label else None
        if label and got != values:
            fail(f"{name} has {label} values {sorted(got)}, want {sorted(values)}")
        for s in f.samples:
            if not math.isfinite(s.value) or s.value < 0:
                fail(f"{name}{s.labels} = {s.value}")
    one = lambda name: families[name].samples[0].value
    if abs(one("moe_experts_per_token") - top_k) > 1e-9:
        fail(f"experts per token {one('moe_experts_per_token')}, want {top_k}")
    if not 0 < one("moe_active_fraction") < 1:
        fail(f"active fraction {one('moe_active_fraction')}")
    if one("moe_token_multiply_adds") <= 0 or one("moe_token_weight_bytes") <= 0:
        fail("a token's cost is not counted")
    if one("moe_router_entropy_nats") <= 0:
        fail("router entropy is not positive")
    for s in families["moe_expert_jain_fairness"].samples:
        if not 0 < s.value <= 1:
            fail(f"Jain fairness {s.value} outside (0, 1]")
    tokens = {s.labels["phase"]: s.value for s in families["moe_call_tokens"].samples}
    if tokens["prompt"] <= 0 or tokens["generate"] <= 0:
        fail(f"tokens {tokens}")
    print(f"ok: {len(families)} families, {sum(len(f.samples) for f in families.values())} samples")


main()
