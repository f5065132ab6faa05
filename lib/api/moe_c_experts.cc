// The C ABI of experts as placed units: where each expert lives, pinning, and the expert
// cache's statistics per layer.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "include/moe_c.h"
#include "lib/api/c_api_support.h"
#include "lib/api/handles.h"

using moe::api::CopyOut;
using moe::api::Fail;
using moe::api::FromStatus;
using moe::api::Guard;
using moe::api::InitVersioned;
using moe::api::Null;
using moe::api::WriteVersioned;

static_assert(static_cast<int>(moe::ExpertTier::kResident) == MOE_EXPERT_RESIDENT &&
                  static_cast<int>(moe::ExpertTier::kCached) == MOE_EXPERT_CACHED &&
                  static_cast<int>(moe::ExpertTier::kPinned) == MOE_EXPERT_PINNED,
              "moe_expert_tier follows moe::ExpertTier");

namespace {

moe_status CheckExpert(const moe::Engine& e, int32_t layer, int32_t expert) {
  const moe::HParams& h = e.model()->hp();
  if (layer < 0 || layer >= h.n_layer || expert < 0 || expert >= h.n_expert) {
    return Fail(MOE_ERROR_OUT_OF_RANGE, absl::StrCat("expert ", expert, " of layer ", layer,
                                                     " does not exist: the model has ", h.n_layer,
                                                     " layers of ", h.n_expert, " experts"));
  }
  return MOE_OK;
}

// "gate/up/down" type names into a C string field ("up/down" for an ungated expert: no gate).
void CopyTypes(std::optional<moe::DType> gate, moe::DType up, moe::DType down, char (&out)[32]) {
  const std::string s = absl::StrCat(gate ? absl::StrCat(moe::DTypeName(*gate), "/") : "",
                                     moe::DTypeName(up), "/", moe::DTypeName(down));
  std::snprintf(out, sizeof(out), "%s", s.c_str());
}

}  // namespace

extern "C" {

moe_status moe_expert_placement_init(moe_expert_placement* p, size_t struct_size) {
  moe_expert_placement d{};
  d.struct_size = sizeof(d);
  d.tier = MOE_EXPERT_RESIDENT;
  return InitVersioned(d, p, struct_size, "moe_expert_placement_init: placement");
}

moe_status moe_model_get_expert_placement(const moe_model* model, int32_t layer, int32_t expert,
                                          moe_expert_placement* out) {
  return Guard("moe_model_get_expert_placement", [&]() -> moe_status {
    if (model == nullptr) return Null("model");
    if (out == nullptr) return Null("placement");
    const moe::Engine& e = *model->engine;
    if (moe_status s = CheckExpert(e, layer, expert); s != MOE_OK) return s;
    moe_expert_placement p{};
    p.struct_size = sizeof(p);
    const moe::ExpertWeights& w = e.model()->layers()[layer].experts[expert];
    if (const moe::ExpertStore* store = e.expert_store()) {
      p.tier = static_cast<int32_t>(store->tier(layer, expert));
      p.in_memory = store->InMemory(layer, expert) ? 1 : 0;
      const moe::ExpertSource& src = store->source(layer, expert);
      p.bytes = src.gate.bytes() + src.up.bytes() + src.down.bytes();
      CopyTypes(src.gate.bytes() > 0 ? std::optional(src.gate.dtype) : std::nullopt, src.up.dtype,
                src.down.dtype, p.weight_types);
    } else {
      p.tier = MOE_EXPERT_RESIDENT;
      p.in_memory = 1;
      p.bytes = w.byte_size();
      CopyTypes(w.gate.empty() ? std::nullopt : std::optional(w.gate.dtype), w.up.dtype,
                w.down.dtype, p.weight_types);
    }
    return WriteVersioned(p, out, "placement");
  });
}

moe_status moe_model_pin_expert(moe_model* model, int32_t layer, int32_t expert) {
  return Guard("moe_model_pin_expert", [&]() -> moe_status {
    if (model == nullptr) return Null("model");
    if (moe_status s = CheckExpert(*model->engine, layer, expert); s != MOE_OK) return s;
    moe::ExpertStore* store = model->engine->expert_store();
    if (store == nullptr) return MOE_OK;  // every expert is resident already
    absl::Status s = store->Pin(layer, expert);
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      return Fail(MOE_ERROR_OUT_OF_MEMORY, std::string(s.message()));
    }
    return FromStatus(s);
  });
}

moe_status moe_model_unpin_expert(moe_model* model, int32_t layer, int32_t expert) {
  return Guard("moe_model_unpin_expert", [&]() -> moe_status {
    if (model == nullptr) return Null("model");
    if (moe_status s = CheckExpert(*model->engine, layer, expert); s != MOE_OK) return s;
    moe::ExpertStore* store = model->engine->expert_store();
    if (store == nullptr) {
      return Fail(MOE_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("expert ", expert, " of layer ", layer,
                               " is resident: the model was loaded without an expert cache"));
    }
    return FromStatus(store->Unpin(layer, expert));
  });
}

moe_status moe_model_warmup(moe_model* model, const char* profile_path, size_t* n_read) {
  return Guard("moe_model_warmup", [&]() -> moe_status {
    if (n_read != nullptr) *n_read = 0;
    if (model == nullptr) return Null("model");
    if (profile_path == nullptr) return Null("profile_path");
    absl::StatusOr<size_t> read = model->engine->Warm(profile_path);
    if (!read.ok()) return FromStatus(read.status());
    if (n_read != nullptr) *n_read = *read;
    return MOE_OK;
  });
}

moe_status moe_context_write_routing_profile(const moe_context* ctx, const char* path) {
  return Guard("moe_context_write_routing_profile", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    if (path == nullptr) return Null("path");
    const moe::HParams& h = ctx->engine->model()->hp();
    moe::RoutingProfile profile;
    if (absl::Status s = ctx->session->Inspect(
            [&] { profile.counts = ctx->session->stats().forward.expert_counts; });
        !s.ok()) {
      return FromStatus(s);
    }
    // Before any call the counts are empty: a profile of zeros.
    if (profile.counts.empty()) {
      profile.counts.assign(h.n_layer, std::vector<int64_t>(h.n_expert, 0));
    }
    return FromStatus(profile.WriteFile(path));
  });
}

moe_status moe_context_get_expert_layer_stats(const moe_context* ctx,
                                              moe_expert_layer_stats* layers, size_t capacity,
                                              size_t* len) {
  return Guard("moe_context_get_expert_layer_stats", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    const moe::Engine& e = *ctx->engine;
    const int n_layer = static_cast<int>(e.model()->hp().n_layer);
    std::vector<moe::ExpertCacheStats> per_layer;
    if (absl::Status s =
            ctx->session->Inspect([&] { per_layer = ctx->session->stats().expert_cache_layers; });
        !s.ok()) {
      return FromStatus(s);
    }
    std::vector<moe_expert_layer_stats> out(n_layer, moe_expert_layer_stats{});
    const moe::ExpertStore* store = e.expert_store();
    for (int l = 0; l < n_layer; ++l) {
      moe_expert_layer_stats& o = out[l];
      if (static_cast<size_t>(l) < per_layer.size()) {
        const moe::ExpertCacheStats& c = per_layer[l];
        o.hits = c.hits;
        o.misses = c.misses;
        o.bytes_read = c.bytes_loaded;
        o.read_seconds = c.load_seconds;
        o.wait_seconds = c.wait_seconds;
        o.prefetches = c.prefetches;
        o.prefetch_hits = c.prefetch_hits;
        o.prefetch_wasted_bytes = c.prefetch_wasted_bytes;
        o.predicted = c.predicted;
        o.predicted_right = c.predicted_right;
      }
      o.experts_in_memory = store == nullptr ? static_cast<int32_t>(e.model()->hp().n_expert)
                                             : store->ExpertsInMemory(l);
    }
    return CopyOut(out.data(), out.size(), sizeof(moe_expert_layer_stats), layers, capacity, len,
                   false);
  });
}

}  // extern "C"
