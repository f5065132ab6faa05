// The C ABI of the batching engine: many requests at once over one model.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "include/moe_c.h"
#include "lib/api/c_api_support.h"
#include "lib/api/generate_options.h"
#include "lib/api/handles.h"
#include "lib/runtime/batch_engine.h"
#include "lib/runtime/metrics_text.h"

using moe::api::CopyOut;
using moe::api::Fail;
using moe::api::FromStatus;
using moe::api::Guard;
using moe::api::InitVersioned;
using moe::api::Log;
using moe::api::Null;
using moe::api::ReadGenerateOptions;
using moe::api::ReadThreadsAndKvType;
using moe::api::ReadVersioned;
using moe::api::WriteVersioned;

// Waiting threads hold the engine too, so moe_engine_free (which closes it: every request
// finishes, every waiter wakes) never frees it under them.
struct moe_engine {
  // An engine over a world of ranks (moe_dist_engine_create) keeps its communicator: it goes
  // after the engine.
  std::shared_ptr<moe::Communicator> world;
  std::shared_ptr<moe::BatchEngine> engine;
  uint64_t seed;
};

struct moe_request_result {
  moe::RequestResult result;
  std::string message;
};

static_assert(static_cast<int>(moe::FinishReason::kCancelled) == MOE_FINISH_CANCELLED &&
                  static_cast<int>(moe::FinishReason::kError) == MOE_FINISH_ERROR,
              "moe_finish_reason follows moe::FinishReason");

namespace {

moe_status WaitStatus(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    return Fail(MOE_ERROR_TIMEOUT, std::string(s.message()));
  }
  if (s.code() == absl::StatusCode::kUnavailable) {
    return Fail(MOE_ERROR_NOT_READY, std::string(s.message()));
  }
  return FromStatus(s);
}

moe_status HandOver(absl::StatusOr<moe::RequestResult> r, moe_request_result** out) {
  if (!r.ok()) return WaitStatus(r.status());
  auto* result = new moe_request_result{*std::move(r), ""};
  result->message = std::string(result->result.status.message());
  *out = result;
  return MOE_OK;
}

}  // namespace

namespace moe::api {

moe_status CreateEngine(moe_model* model, const moe_engine_params* params,
                        std::shared_ptr<moe::Communicator> world, moe_engine** out) {
  if (out == nullptr) return Null("out_engine");
  *out = nullptr;
  if (model == nullptr) return Null("model");
  moe_engine_params p;
  moe_engine_params_init(&p, sizeof(p));
  if (moe_status s = ReadVersioned(params, &p, "moe_engine_params"); s != MOE_OK) return s;
  moe::DType kv_type;
  if (moe_status s = ReadThreadsAndKvType(p.n_threads, p.kv_type, &kv_type); s != MOE_OK) {
    return s;
  }
  if (p.when_kv_full != MOE_KV_FULL_PREEMPT && p.when_kv_full != MOE_KV_FULL_FINISH) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, absl::StrCat("unknown when_kv_full ", p.when_kv_full));
  }
  if (p.n_ctx < 0 || p.kv_tokens < 0 || p.kv_bytes < 0) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                "n_ctx, kv_tokens and kv_bytes must not be negative (0: the default)");
  }
  moe::BatchEngineOptions o;
  o.threads = p.n_threads;
  o.kv_type = kv_type;
  o.block_size = p.kv_block_size;
  o.n_ctx = p.n_ctx;
  o.kv_tokens = p.kv_tokens;
  o.kv_bytes = static_cast<size_t>(p.kv_bytes);
  o.max_sequences = p.max_sequences;
  o.max_step_tokens = p.max_step_tokens;
  o.prefix_sharing = p.prefix_sharing != 0;
  o.when_full =
      p.when_kv_full == MOE_KV_FULL_FINISH ? moe::WhenKvFull::kFinish : moe::WhenKvFull::kPreempt;
  o.own_thread = p.own_thread != 0;
  o.routing = moe::api::RoutingPolicyOf(p);
  o.communicator = world.get();
  auto engine = moe::BatchEngine::Create(model->engine, o);
  if (!engine.ok()) return FromStatus(engine.status());
  *out = new moe_engine{std::move(world), std::shared_ptr<moe::BatchEngine>(*std::move(engine)),
                        p.seed};
  return MOE_OK;
}

}  // namespace moe::api

extern "C" {

moe_status moe_engine_params_init(moe_engine_params* p, size_t struct_size) {
  moe_engine_params d{};
  d.struct_size = sizeof(d);
  d.kv_type = MOE_KV_F16;
  d.kv_block_size = 32;
  d.max_sequences = 16;
  d.max_step_tokens = 256;
  d.prefix_sharing = 1;
  d.when_kv_full = MOE_KV_FULL_PREEMPT;
  d.own_thread = 1;
  d.min_experts = 1;
  d.router_temperature = 1.f;
  d.load_limit = 2.f;
  return InitVersioned(d, p, struct_size, "moe_engine_params_init: params");
}

moe_status moe_request_params_init(moe_request_params* p, size_t struct_size) {
  moe_request_params d{};
  d.struct_size = sizeof(d);
  d.keep_result = 1;
  return InitVersioned(d, p, struct_size, "moe_request_params_init: params");
}

moe_status moe_request_stats_init(moe_request_stats* s, size_t struct_size) {
  moe_request_stats d{};
  d.struct_size = sizeof(d);
  return InitVersioned(d, s, struct_size, "moe_request_stats_init: stats");
}

moe_status moe_engine_stats_init(moe_engine_stats* s, size_t struct_size) {
  moe_engine_stats d{};
  d.struct_size = sizeof(d);
  return InitVersioned(d, s, struct_size, "moe_engine_stats_init: stats");
}

moe_status moe_engine_create(moe_model* model, const moe_engine_params* params, moe_engine** out) {
  return Guard("moe_engine_create",
               [&]() -> moe_status { return moe::api::CreateEngine(model, params, nullptr, out); });
}

void moe_engine_free(moe_engine* e) {
  if (e == nullptr) return;
  (void)Guard("moe_engine_free", [&]() -> moe_status {
    if (absl::Status s = e->engine->Close(); !s.ok()) {
      Log(MOE_LOG_ERROR, "moe_engine_free from a request callback: refused, nothing freed");
      return FromStatus(s);
    }
    delete e;  // a thread still waiting holds the engine until it returns
    return MOE_OK;
  });
}

moe_status moe_engine_submit(moe_engine* e, const moe_request_params* params,
                             moe_request_callback callback, void* user_data,
                             moe_request_id* out_id) {
  return Guard("moe_engine_submit", [&]() -> moe_status {
    if (out_id == nullptr) return Null("out_id");
    *out_id = 0;
    if (e == nullptr) return Null("engine");
    if (params == nullptr) return Null("params (a prompt is needed)");
    moe_request_params p;
    moe_request_params_init(&p, sizeof(p));
    if (moe_status s = ReadVersioned(params, &p, "moe_request_params"); s != MOE_OK) return s;
    moe::RequestOptions r;
    if (p.n_tokens > 0) {
      if (p.tokens == nullptr) return Null("tokens");
      r.tokens.assign(p.tokens, p.tokens + p.n_tokens);
    } else {
      if (p.prompt == nullptr) return Null("prompt (and no tokens)");
      r.prompt = p.prompt;
    }
    const int32_t n_vocab = static_cast<int32_t>(e->engine->engine().model()->hp().n_vocab);
    if (moe_status s = ReadGenerateOptions(p.generate, n_vocab, e->seed, &r.generate);
        s != MOE_OK) {
      return s;
    }
    r.parse_special = r.generate.parse_special;
    r.keep_result = p.keep_result != 0;
    moe::RequestCallback cb;
    if (callback != nullptr) {
      cb = [callback, user_data](const moe::RequestEvent& ev) {
        const std::string message(ev.status.message());
        moe_request_event c{};
        c.struct_size = sizeof(c);
        c.request = ev.request;
        c.token = ev.token;
        c.piece = ev.piece.data();
        c.piece_len = ev.piece.size();
        c.finish_reason = static_cast<int32_t>(ev.finish);
        c.status = moe::api::CodeFor(ev.status);
        c.message = message.c_str();
        if (ev.result == nullptr) return callback(&c, user_data) != 0;
        const moe_request_result result{*ev.result, message};
        c.result = &result;
        return callback(&c, user_data) != 0;
      };
    }
    auto id = e->engine->Submit(r, std::move(cb));
    if (!id.ok()) return FromStatus(id.status());
    *out_id = *id;
    return MOE_OK;
  });
}

moe_status moe_engine_cancel(moe_engine* e, moe_request_id request) {
  return Guard("moe_engine_cancel", [&]() -> moe_status {
    if (e == nullptr) return Null("engine");
    return FromStatus(e->engine->Cancel(request));
  });
}

moe_status moe_engine_wait(moe_engine* e, moe_request_id request, double timeout_seconds,
                           moe_request_result** out) {
  return Guard("moe_engine_wait", [&]() -> moe_status {
    if (out == nullptr) return Null("out_result");
    *out = nullptr;
    if (e == nullptr) return Null("engine");
    if (timeout_seconds != timeout_seconds) {
      return Fail(MOE_ERROR_INVALID_ARGUMENT, "timeout_seconds is NaN");
    }
    std::shared_ptr<moe::BatchEngine> engine = e->engine;  // outlives a free meanwhile
    return HandOver(engine->Wait(request, timeout_seconds), out);
  });
}

moe_status moe_engine_try_wait(moe_engine* e, moe_request_id request, moe_request_result** out) {
  return Guard("moe_engine_try_wait", [&]() -> moe_status {
    if (out == nullptr) return Null("out_result");
    *out = nullptr;
    if (e == nullptr) return Null("engine");
    return HandOver(e->engine->TryWait(request), out);
  });
}

moe_status moe_engine_step(moe_engine* e, int32_t* did_work) {
  return Guard("moe_engine_step", [&]() -> moe_status {
    if (did_work != nullptr) *did_work = 0;
    if (e == nullptr) return Null("engine");
    auto worked = e->engine->Step();
    if (!worked.ok()) return FromStatus(worked.status());
    if (did_work != nullptr) *did_work = *worked ? 1 : 0;
    return MOE_OK;
  });
}

const char* moe_request_result_text(const moe_request_result* r) {
  return r == nullptr ? "" : r->result.text.c_str();
}

const int32_t* moe_request_result_tokens(const moe_request_result* r, size_t* n_tokens) {
  if (n_tokens != nullptr) *n_tokens = r == nullptr ? 0 : r->result.tokens.size();
  return r == nullptr ? nullptr : r->result.tokens.data();
}

const char* moe_request_result_message(const moe_request_result* r) {
  return r == nullptr ? "" : r->message.c_str();
}

moe_status moe_request_result_get_stats(const moe_request_result* r, moe_request_stats* out) {
  return Guard("moe_request_result_get_stats", [&]() -> moe_status {
    if (r == nullptr) return Null("result");
    const moe::RequestStats& st = r->result.stats;
    moe_request_stats s{};
    s.struct_size = sizeof(s);
    s.finish_reason = static_cast<int32_t>(r->result.finish);
    s.status = moe::api::CodeFor(r->result.status);
    s.prompt_tokens = static_cast<int32_t>(st.prompt_tokens);
    s.prefix_tokens_reused = static_cast<int32_t>(st.prefix_tokens_reused);
    s.generated_tokens = static_cast<int32_t>(st.generated_tokens);
    s.preemptions = st.preemptions;
    s.queue_seconds = st.queue_s;
    s.first_token_seconds = st.first_token_s;
    s.total_seconds = st.total_s;
    s.decode_tokens_per_second = st.decode_tok_s;
    s.weight_bytes = st.weight_bytes;
    s.multiply_adds = st.multiply_adds;
    s.decode_weight_bytes_per_token = st.decode_weight_bytes_per_token;
    s.decode_multiply_adds_per_token = st.decode_multiply_adds_per_token;
    return WriteVersioned(s, out, "stats");
  });
}

void moe_request_result_free(moe_request_result* r) { delete r; }

moe_status moe_engine_get_stats(const moe_engine* e, moe_engine_stats* out) {
  return Guard("moe_engine_get_stats", [&]() -> moe_status {
    if (e == nullptr) return Null("engine");
    const moe::BatchEngineStats st = e->engine->stats();
    moe_engine_stats s{};
    s.struct_size = sizeof(s);
    s.submitted = st.submitted;
    s.finished = st.finished;
    s.running = st.running;
    s.waiting = st.waiting;
    s.steps = st.steps;
    s.tokens = st.tokens;
    s.decode_tokens = st.decode_tokens;
    s.prefix_tokens_reused = st.prefix_tokens_reused;
    s.preemptions = st.preemptions;
    s.kv_blocks = st.kv_blocks;
    s.kv_blocks_in_use = st.kv_blocks_in_use;
    s.kv_blocks_cached = st.kv_blocks_cached;
    s.kv_block_size = st.block_size;
    s.step_seconds = st.step_s;
    s.mean_sequences_per_step = st.mean_sequences_per_step;
    s.mean_tokens_per_step = st.mean_tokens_per_step;
    s.mean_experts_per_step = st.mean_experts_per_step;
    s.exchange_bytes = st.exchange_bytes;
    s.exchange_seconds = st.exchange_s;
    s.rerouted_choices = st.rerouted_choices;
    s.dropped_choices = st.dropped_choices;
    s.reweighted_choices = st.reweighted_choices;
    s.kv_window_blocks = st.kv_window_blocks;
    s.kv_window_blocks_in_use = st.kv_window_blocks_in_use;
    s.kv_window_blocks_cached = st.kv_window_blocks_cached;
    s.kv_bytes = st.kv_bytes;
    s.kv_state_slots = st.kv_state_slots;
    s.kv_state_slots_in_use = st.kv_state_slots_in_use;
    s.kv_state_slots_cached = st.kv_state_slots_cached;
    return WriteVersioned(s, out, "stats");
  });
}

moe_status moe_engine_disable_experts(moe_engine* e, int32_t layer, const int32_t* experts,
                                      size_t n_experts) {
  return Guard("moe_engine_disable_experts", [&]() -> moe_status {
    if (e == nullptr) return Null("engine");
    if (experts == nullptr && n_experts > 0) return Null("experts");
    return FromStatus(e->engine->SetDisabledExperts(
        layer, absl::MakeConstSpan(experts, experts == nullptr ? 0 : n_experts)));
  });
}

moe_status moe_engine_metrics_text(const moe_engine* e, char* buf, size_t capacity, size_t* len) {
  return Guard("moe_engine_metrics_text", [&]() -> moe_status {
    if (e == nullptr) return Null("engine");
    const std::string text = moe::EngineMetricsText(e->engine->stats());
    return CopyOut(text.data(), text.size(), 1, buf, capacity, len, true);
  });
}

}  // extern "C"
