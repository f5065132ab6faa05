// The C ABI over the C++ runtime. Every function validates its arguments, runs inside an
// exception barrier, and reports failures as a moe_status plus a thread-local message.
#include "include/moe_c.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/api/c_api_support.h"
#include "lib/api/generate_options.h"
#include "lib/api/handles.h"
#include "lib/runtime/chat_template.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/metrics_text.h"
#include "lib/runtime/session.h"
#include "lib/tokenizer/stream_decoder.h"

using moe::api::CopyOut;
using moe::api::Fail;
using moe::api::FromStatus;
using moe::api::Guard;
using moe::api::InitVersioned;
using moe::api::Null;
using moe::api::ReadGenerateOptions;
using moe::api::ReadSamplerConfig;
using moe::api::ReadThreadsAndKvType;
using moe::api::ReadVersioned;
using moe::api::WriteVersioned;

namespace {

// Contexts that moe_context_free was asked to free from inside their own token callback, on
// this thread: the running moe_generate frees them as it returns. Thread-local, because once
// that call has left the context's call slot another thread may free it: the returning call
// must decide without reading the context.
thread_local std::vector<moe_context*> free_on_return;

absl::StatusOr<const moe::Tokenizer*> TokenizerOf(const moe_model* model) {
  return model->engine->RequireTokenizer();
}

moe_status GenerateImpl(moe_context* ctx, const std::string* text, const int32_t* prompt,
                        size_t n_prompt, const moe_generate_params* params,
                        moe_token_callback callback, void* user_data) {
  moe::GenerateOptions go;
  const int32_t n_vocab = static_cast<int32_t>(ctx->engine->model()->hp().n_vocab);
  if (moe_status s = ReadGenerateOptions(params, n_vocab, ctx->seed, &go); s != MOE_OK) return s;
  moe::Session::TokenCallback cb;
  if (callback != nullptr) {
    cb = [callback, user_data](int32_t token, absl::string_view piece) {
      return callback(token, piece.data(), piece.size(), user_data) != 0;
    };
  }
  absl::Status s = text != nullptr ? ctx->session->Generate(*text, go, cb)
                                   : ctx->session->GenerateFromTokens({prompt, n_prompt}, go, cb);
  return FromStatus(s);
}

// Frees a context whose own callback asked for that while the call ran.
moe_status FinishCall(moe_context* ctx, moe_status status) {
  auto it = std::find(free_on_return.begin(), free_on_return.end(), ctx);
  if (ctx != nullptr && it != free_on_return.end()) {
    free_on_return.erase(it);
    delete ctx;
  }
  return status;
}

}  // namespace

extern "C" {

const char* moe_version_string(void) { return MOE_VERSION_STRING; }
int32_t moe_version_number(void) { return MOE_VERSION_NUMBER; }

const char* moe_status_string(moe_status status) {
  switch (status) {
    case MOE_OK:
      return "ok";
    case MOE_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case MOE_ERROR_NOT_FOUND:
      return "not found";
    case MOE_ERROR_IO:
      return "input/output error";
    case MOE_ERROR_CORRUPT_MODEL:
      return "corrupt model file";
    case MOE_ERROR_UNSUPPORTED:
      return "unsupported";
    case MOE_ERROR_OUT_OF_RANGE:
      return "out of range";
    case MOE_ERROR_CONTEXT_FULL:
      return "context full";
    case MOE_ERROR_CANCELLED:
      return "cancelled";
    case MOE_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case MOE_ERROR_BUFFER_TOO_SMALL:
      return "buffer too small";
    case MOE_ERROR_BUSY:
      return "context busy";
    case MOE_ERROR_INTERNAL:
      return "internal error";
    case MOE_ERROR_NOT_READY:
      return "not finished yet";
    case MOE_ERROR_TIMEOUT:
      return "timed out";
  }
  return "unknown status";
}

const char* moe_last_error(void) { return moe::api::LastError(); }

void moe_set_log_callback(moe_log_callback callback, moe_log_level min_level, void* user_data) {
  moe::api::SetLogCallback(callback, min_level, user_data);
}

/* ----- models ----- */

moe_status moe_model_params_init(moe_model_params* p, size_t struct_size) {
  moe_model_params d{};
  d.struct_size = sizeof(moe_model_params);
  d.use_mmap = 0;
  d.expert_eviction = MOE_EXPERT_EVICT_LRU;
  d.expert_direct_io = 1;
  d.expert_prefetch = 1;
  d.memory_fit = MOE_MEMORY_FIT_CACHE_EXPERTS;
  return InitVersioned(d, p, struct_size, "moe_model_params_init: params");
}

}  // extern "C"

namespace moe::api {

moe_status LoadModel(const char* path, const moe_model_params* params, moe::LoadOptions lo,
                     moe_model** out) {
  if (out == nullptr) return Null("out_model");
  *out = nullptr;
  if (path == nullptr) return Null("path");
  moe_model_params p;
  moe_model_params_init(&p, sizeof(p));
  if (moe_status s = ReadVersioned(params, &p, "moe_model_params"); s != MOE_OK) return s;
  lo.use_mmap = p.use_mmap != 0;
  if (!(p.expert_cache_fraction >= 0 && p.expert_cache_fraction <= 1)) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                absl::StrCat("expert_cache_fraction is ", p.expert_cache_fraction,
                             ": it must be in [0, 1] (0: not a fraction)"));
  }
  if (p.expert_eviction != MOE_EXPERT_EVICT_LRU && p.expert_eviction != MOE_EXPERT_EVICT_LFRU) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                absl::StrCat("unknown expert_eviction ", p.expert_eviction));
  }
  lo.expert_cache_bytes = static_cast<size_t>(p.expert_cache_bytes);
  lo.expert_cache_fraction = p.expert_cache_fraction;
  lo.expert_eviction = p.expert_eviction == MOE_EXPERT_EVICT_LFRU ? moe::EvictionPolicy::kLfru
                                                                  : moe::EvictionPolicy::kLru;
  lo.expert_direct_io = p.expert_direct_io != 0;
  if (p.expert_placement_path != nullptr) lo.expert_placement_path = p.expert_placement_path;
  if (p.expert_warmup_path != nullptr) lo.expert_warmup_path = p.expert_warmup_path;
  lo.expert_prefetch = p.expert_prefetch != 0;
  if (p.memory_fit != MOE_MEMORY_FIT_CACHE_EXPERTS && p.memory_fit != MOE_MEMORY_FIT_ERROR) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, absl::StrCat("unknown memory_fit ", p.memory_fit));
  }
  if (p.device != MOE_DEVICE_CPU && p.device != MOE_DEVICE_CUDA && p.device != MOE_DEVICE_AUTO) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, absl::StrCat("unknown device ", p.device));
  }
  if (p.gpu_index < 0) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, absl::StrCat("gpu_index is ", p.gpu_index));
  }
  lo.device = p.device == MOE_DEVICE_CUDA   ? moe::ComputeDevice::kCuda
              : p.device == MOE_DEVICE_AUTO ? moe::ComputeDevice::kAuto
                                            : moe::ComputeDevice::kCpu;
  lo.device_index = p.gpu_index;
  lo.device_memory_bytes = static_cast<size_t>(p.gpu_memory_bytes);
  lo.memory_limit_bytes = static_cast<size_t>(p.memory_limit_bytes);
  lo.memory_fit =
      p.memory_fit == MOE_MEMORY_FIT_ERROR ? moe::MemoryFit::kError : moe::MemoryFit::kCacheExperts;
  if (p.progress_callback != nullptr) {
    lo.progress = [cb = p.progress_callback, ud = p.progress_user_data](float f) {
      return cb(f, ud) != 0;
    };
  }
  auto engine = moe::Engine::Load(path, lo);
  if (!engine.ok()) {
    // At load, a resource that runs out is memory (the model, or the expert cache's minimum).
    if (engine.status().code() == absl::StatusCode::kResourceExhausted) {
      return Fail(MOE_ERROR_OUT_OF_MEMORY, std::string(engine.status().message()));
    }
    return FromStatus(engine.status());
  }
  auto model = std::make_unique<moe_model>();
  model->engine = *std::move(engine);
  const moe::ModelSpec& spec = model->engine->model()->spec();
  model->architecture = std::string(moe::ArchName(spec.arch));
  model->name = spec.name;
  if (!model->engine->memory_note().empty()) {
    moe::api::Log(MOE_LOG_WARN, absl::StrCat(path, ": ", model->engine->memory_note()));
  }
  moe::api::Log(MOE_LOG_INFO,
                absl::StrCat("loaded ", path, ": ", model->architecture, ", ", spec.hp.n_layer,
                             " layers, ", spec.hp.n_expert, " experts (top-", spec.hp.n_expert_used,
                             "), on ", model->engine->device_note()));
  *out = model.release();
  return MOE_OK;
}

}  // namespace moe::api

extern "C" {

moe_status moe_model_load(const char* path, const moe_model_params* params, moe_model** out) {
  return Guard("moe_model_load",
               [&]() { return moe::api::LoadModel(path, params, moe::LoadOptions(), out); });
}

void moe_model_free(moe_model* model) { delete model; }

moe_status moe_model_info_init(moe_model_info* info, size_t struct_size) {
  moe_model_info d{};
  d.struct_size = sizeof(moe_model_info);
  return InitVersioned(d, info, struct_size, "moe_model_info_init: info");
}

moe_status moe_model_get_info(const moe_model* model, moe_model_info* info) {
  return Guard("moe_model_get_info", [&]() -> moe_status {
    if (model == nullptr) return Null("model");
    const moe::Engine& e = *model->engine;
    const moe::HParams& h = e.model()->hp();
    moe_model_info i{};
    i.struct_size = sizeof(i);
    i.architecture = model->architecture.c_str();
    i.name = model->name.c_str();
    i.n_layer = static_cast<int32_t>(h.n_layer);
    i.n_embd = static_cast<int32_t>(h.n_embd);
    i.n_head = static_cast<int32_t>(h.n_head);
    i.n_head_kv = static_cast<int32_t>(h.n_head_kv);
    i.n_expert = static_cast<int32_t>(h.n_expert);
    i.n_expert_used = static_cast<int32_t>(h.n_expert_used);
    i.n_vocab = static_cast<int32_t>(h.n_vocab);
    i.n_ctx_train = static_cast<int32_t>(h.n_ctx_train);
    i.n_params_total = e.params().total;
    i.n_params_active = e.params().active_per_token;
    i.weight_bytes_total = e.params().total_bytes;
    i.weight_bytes_held = e.params().held_bytes;
    const moe::Tokenizer* tok = e.tokenizer();
    i.bos_token = tok ? tok->bos_id() : -1;
    i.eos_token = tok ? tok->eos_id() : -1;
    i.eot_token = tok ? tok->eot_id() : -1;
    i.has_tokenizer = tok != nullptr;
    i.has_chat_template = !e.model()->spec().tokenizer.chat_template.empty();
    i.device = e.device_note().c_str();
    return WriteVersioned(i, info, "info");
  });
}

const char* moe_model_chat_template(const moe_model* model) {
  if (model == nullptr) {
    Null("model");
    return nullptr;
  }
  return model->engine->model()->spec().tokenizer.chat_template.c_str();
}

/* ----- tokens and text ----- */

moe_status moe_tokenize(const moe_model* model, const char* text, size_t text_len, uint32_t flags,
                        int32_t* tokens, size_t capacity, size_t* n_tokens) {
  return Guard("moe_tokenize", [&]() -> moe_status {
    if (model == nullptr) return Null("model");
    if (text == nullptr && text_len > 0) return Null("text");
    if (n_tokens == nullptr) return Null("n_tokens");
    if (flags & ~(MOE_TOKENIZE_ADD_BOS | MOE_TOKENIZE_PARSE_SPECIAL)) {
      return Fail(MOE_ERROR_INVALID_ARGUMENT, "unknown tokenize flags");
    }
    auto tok = TokenizerOf(model);
    if (!tok.ok()) return FromStatus(tok.status());
    moe::EncodeOptions eo;
    eo.add_bos = (flags & MOE_TOKENIZE_ADD_BOS) != 0;
    eo.parse_special = (flags & MOE_TOKENIZE_PARSE_SPECIAL) != 0;
    std::vector<int32_t> ids = (*tok)->Encode(absl::string_view(text ? text : "", text_len), eo);
    return CopyOut(ids.data(), ids.size(), sizeof(int32_t), tokens, capacity, n_tokens, false);
  });
}

moe_status moe_detokenize(const moe_model* model, const int32_t* tokens, size_t n_tokens, char* buf,
                          size_t capacity, size_t* len) {
  return Guard("moe_detokenize", [&]() -> moe_status {
    if (model == nullptr) return Null("model");
    if (tokens == nullptr && n_tokens > 0) return Null("tokens");
    if (len == nullptr) return Null("len");
    auto tok = TokenizerOf(model);
    if (!tok.ok()) return FromStatus(tok.status());
    auto text = (*tok)->Decode({tokens, n_tokens});
    if (!text.ok()) return FromStatus(text.status());
    return CopyOut(text->data(), text->size(), 1, buf, capacity, len, true);
  });
}

moe_status moe_detokenizer_create(const moe_model* model, moe_detokenizer** out) {
  return Guard("moe_detokenizer_create", [&]() -> moe_status {
    if (out == nullptr) return Null("out");
    *out = nullptr;
    if (model == nullptr) return Null("model");
    auto tok = TokenizerOf(model);
    if (!tok.ok()) return FromStatus(tok.status());
    auto d = std::make_unique<moe_detokenizer>();
    d->engine = model->engine;
    d->decoder = std::make_unique<moe::StreamDecoder>(**tok);
    *out = d.release();
    return MOE_OK;
  });
}

void moe_detokenizer_free(moe_detokenizer* d) { delete d; }

moe_status moe_detokenizer_push(moe_detokenizer* d, int32_t token, char* buf, size_t capacity,
                                size_t* len) {
  return Guard("moe_detokenizer_push", [&]() -> moe_status {
    if (d == nullptr) return Null("detokenizer");
    if (len == nullptr) return Null("len");
    std::string text;
    if (d->held) {
      if (d->held->first != token) {
        return Fail(MOE_ERROR_INVALID_ARGUMENT,
                    absl::StrCat("token ", d->held->first,
                                 " did not fit the buffer last time: push it again first"));
      }
      text = d->held->second;
    } else {
      auto piece = d->decoder->Add(token);
      if (!piece.ok()) return FromStatus(piece.status());
      text = *std::move(piece);
    }
    moe_status s = CopyOut(text.data(), text.size(), 1, buf, capacity, len, true);
    if (s == MOE_ERROR_BUFFER_TOO_SMALL) {
      d->held.emplace(token, std::move(text));
    } else {
      d->held.reset();
    }
    return s;
  });
}

/* ----- chat ----- */

moe_status moe_chat_apply_template(const moe_model* model, const char* template_name,
                                   const moe_chat_message* messages, size_t n_messages,
                                   int32_t add_generation_prompt, char* buf, size_t capacity,
                                   size_t* len) {
  return Guard("moe_chat_apply_template", [&]() -> moe_status {
    if (model == nullptr) return Null("model");
    if (messages == nullptr && n_messages > 0) return Null("messages");
    if (len == nullptr) return Null("len");
    const std::string& jinja = model->engine->model()->spec().tokenizer.chat_template;
    auto format = template_name != nullptr ? moe::ChatFormatFromName(template_name)
                                           : moe::DetectChatFormat(jinja);
    if (!format.ok()) {
      absl::Status st = format.status();
      if (st.code() == absl::StatusCode::kNotFound) {
        st = absl::NotFoundError(
            "the model has no chat template: pass a template name (e.g. \"chatml\")");
      }
      return FromStatus(st);
    }
    std::vector<moe::ChatMessage> msgs;
    for (size_t i = 0; i < n_messages; ++i) {
      if (messages[i].role == nullptr || messages[i].content == nullptr) {
        return Null(absl::StrCat("messages[", i, "].role or .content").c_str());
      }
      msgs.push_back({messages[i].role, messages[i].content});
    }
    std::string eos;
    if (const moe::Tokenizer* tok = model->engine->tokenizer(); tok && tok->eos_id() >= 0) {
      eos = tok->TokenToPiece(tok->eos_id()).value_or("");
    }
    auto text = moe::FormatChat(*format, msgs, add_generation_prompt != 0, eos);
    if (!text.ok()) return FromStatus(text.status());
    return CopyOut(text->data(), text->size(), 1, buf, capacity, len, true);
  });
}

/* ----- contexts ----- */

moe_status moe_context_params_init(moe_context_params* p, size_t struct_size) {
  if (p == nullptr) return Null("params");
  if (struct_size < sizeof(moe_context_params)) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, "moe_context_params_init: struct_size too small");
  }
  *p = moe_context_params{};
  p->struct_size = sizeof(moe_context_params);
  p->kv_type = MOE_KV_F32;
  p->min_experts = 1;
  p->router_temperature = 1.f;
  p->load_limit = 2.f;
  return MOE_OK;
}

}  // extern "C"

namespace moe::api {

moe_status CreateContext(moe_model* model, const moe_context_params* params,
                         std::shared_ptr<moe::Communicator> world, moe_context** out) {
  if (out == nullptr) return Null("out_context");
  *out = nullptr;
  if (model == nullptr) return Null("model");
  moe_context_params p;
  moe_context_params_init(&p, sizeof(p));
  if (moe_status s = ReadVersioned(params, &p, "moe_context_params"); s != MOE_OK) return s;
  if (p.n_ctx < 0) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                absl::StrCat("n_ctx is ", p.n_ctx, ": it must be >= 0 (0: the model's)"));
  }
  moe::DType kv_type;
  if (moe_status s = ReadThreadsAndKvType(p.n_threads, p.kv_type, &kv_type); s != MOE_OK) {
    return s;
  }
  moe::SessionOptions so;
  so.n_ctx = p.n_ctx;
  so.threads = p.n_threads;
  so.kv_type = kv_type;
  so.seed = p.seed;
  so.routing = moe::api::RoutingPolicyOf(p);
  so.communicator = world.get();
  auto session = moe::Session::Create(model->engine, so);
  if (!session.ok()) return FromStatus(session.status());
  *out = new moe_context{std::move(world), model->engine, *std::move(session), p.seed};
  return MOE_OK;
}

}  // namespace moe::api

extern "C" {

moe_status moe_context_create(moe_model* model, const moe_context_params* params,
                              moe_context** out) {
  return Guard("moe_context_create",
               [&]() { return moe::api::CreateContext(model, params, nullptr, out); });
}

void moe_context_free(moe_context* ctx) {
  if (ctx == nullptr) return;
  if (ctx->session->RunningOnThisThread()) {  // from the running call's own callback
    free_on_return.push_back(ctx);
    ctx->session->Cancel();
    return;
  }
  ctx->session->CancelAndWait();  // a call on another thread stops and returns first
  delete ctx;
}

moe_status moe_context_reset(moe_context* ctx) {
  return Guard("moe_context_reset", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    return FromStatus(ctx->session->Reset());
  });
}

moe_status moe_context_truncate(moe_context* ctx, int32_t n_keep) {
  return Guard("moe_context_truncate", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    return FromStatus(ctx->session->Truncate(n_keep));
  });
}

int32_t moe_context_n_past(const moe_context* ctx) {
  return ctx ? static_cast<int32_t>(ctx->session->n_past()) : -1;
}

int32_t moe_context_n_ctx(const moe_context* ctx) {
  return ctx ? static_cast<int32_t>(ctx->session->n_ctx()) : -1;
}

moe_status moe_context_cancel(moe_context* ctx) {
  if (ctx == nullptr) return Null("context");
  ctx->session->Cancel();
  return MOE_OK;
}

/* ----- sampling and low-level generation ----- */

moe_status moe_sampling_params_init(moe_sampling_params* p, size_t struct_size) {
  if (p == nullptr) return Null("params");
  if (struct_size < sizeof(moe_sampling_params)) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, "moe_sampling_params_init: struct_size too small");
  }
  moe::SamplerConfig d;
  *p = moe_sampling_params{};
  p->struct_size = sizeof(moe_sampling_params);
  p->temperature = d.temperature;
  p->top_k = d.top_k;
  p->top_p = d.top_p;
  p->min_p = d.min_p;
  p->repeat_penalty = d.repeat_penalty;
  p->frequency_penalty = d.frequency_penalty;
  p->presence_penalty = d.presence_penalty;
  p->penalty_last_n = d.penalty_last_n;
  return MOE_OK;
}

moe_status moe_decode(moe_context* ctx, const int32_t* tokens, size_t n_tokens) {
  return Guard("moe_decode", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    if (tokens == nullptr) return Null("tokens");
    if (n_tokens == 0) return Fail(MOE_ERROR_INVALID_ARGUMENT, "no tokens to decode");
    return FromStatus(ctx->session->Decode({tokens, n_tokens}));
  });
}

moe_status moe_get_logits(moe_context* ctx, const float** logits, int32_t* n_vocab) {
  return Guard("moe_get_logits", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    if (logits == nullptr || n_vocab == nullptr) return Null("logits or n_vocab");
    absl::Span<const float> l;
    if (absl::Status s = ctx->session->Inspect([&] { l = ctx->session->logits(); }); !s.ok()) {
      return FromStatus(s);
    }
    if (l.empty()) return Fail(MOE_ERROR_INVALID_ARGUMENT, "no logits yet: decode tokens first");
    *logits = l.data();
    *n_vocab = static_cast<int32_t>(l.size());
    return MOE_OK;
  });
}

moe_status moe_sample(moe_context* ctx, const moe_sampling_params* params, int32_t* out_token) {
  return Guard("moe_sample", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    if (out_token == nullptr) return Null("out_token");
    const int32_t n_vocab = static_cast<int32_t>(ctx->engine->model()->hp().n_vocab);
    moe::SamplerConfig sc;
    if (moe_status s = ReadSamplerConfig(params, n_vocab, ctx->seed, &sc); s != MOE_OK) return s;
    auto tok = ctx->session->Sample(sc);
    if (!tok.ok()) return FromStatus(tok.status());
    *out_token = *tok;
    return MOE_OK;
  });
}

/* ----- one-call generation ----- */

moe_status moe_generate_params_init(moe_generate_params* p, size_t struct_size) {
  if (p == nullptr) return Null("params");
  if (struct_size < sizeof(moe_generate_params)) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, "moe_generate_params_init: struct_size too small");
  }
  *p = moe_generate_params{};
  p->struct_size = sizeof(moe_generate_params);
  p->max_tokens = 256;
  return MOE_OK;
}

moe_status moe_generate(moe_context* ctx, const char* prompt, const moe_generate_params* params,
                        moe_token_callback callback, void* user_data) {
  return FinishCall(ctx, Guard("moe_generate", [&]() -> moe_status {
                      if (ctx == nullptr) return Null("context");
                      if (prompt == nullptr) return Null("prompt");
                      std::string text(prompt);
                      return GenerateImpl(ctx, &text, nullptr, 0, params, callback, user_data);
                    }));
}

moe_status moe_generate_tokens(moe_context* ctx, const int32_t* prompt, size_t n_prompt,
                               const moe_generate_params* params, moe_token_callback callback,
                               void* user_data) {
  return FinishCall(ctx, Guard("moe_generate_tokens", [&]() -> moe_status {
                      if (ctx == nullptr) return Null("context");
                      if (prompt == nullptr && n_prompt > 0) return Null("prompt");
                      return GenerateImpl(ctx, nullptr, prompt, n_prompt, params, callback,
                                          user_data);
                    }));
}

/* ----- statistics ----- */

moe_status moe_stats_init(moe_stats* s, size_t struct_size) {
  moe_stats d{};
  d.struct_size = sizeof(moe_stats);
  return InitVersioned(d, s, struct_size, "moe_stats_init: stats");
}

moe_status moe_context_get_stats(const moe_context* ctx, moe_stats* out) {
  return Guard("moe_context_get_stats", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    moe::SessionStats st;
    if (absl::Status s = ctx->session->Inspect([&] { st = ctx->session->stats(); }); !s.ok()) {
      return FromStatus(s);
    }
    const moe::Telemetry& t = st.forward;
    const moe::Engine& e = *ctx->engine;
    moe_stats s{};
    s.struct_size = sizeof(s);
    s.prompt_tokens = static_cast<int32_t>(st.prompt_tokens);
    s.generated_tokens = static_cast<int32_t>(st.generated_tokens);
    s.prompt_seconds = st.prompt_s;
    s.generate_seconds = st.generate_s;
    s.prompt_tokens_per_second = st.prompt_s > 0 ? st.prompt_tokens / st.prompt_s : 0;
    s.generate_tokens_per_second = st.generate_s > 0 ? st.generated_tokens / st.generate_s : 0;
    s.attention_seconds = t.time.attention_s;
    s.router_seconds = t.time.router_s;
    s.experts_seconds = t.time.experts_s;
    s.head_seconds = t.time.head_s;
    s.sampling_seconds = st.sample_s;
    s.active_params_per_token = e.ActiveParamsPerToken(t);
    s.active_fraction = s.active_params_per_token / std::max<int64_t>(1, e.params().total);
    s.mean_router_entropy = t.MeanRouterEntropy();
    s.weight_bytes_read = t.weight_bytes_read;
    s.finish_reason = static_cast<int32_t>(st.finish);
    s.expert_cache_hits = st.expert_cache.hits;
    s.expert_cache_misses = st.expert_cache.misses;
    s.expert_bytes_read = st.expert_cache.bytes_loaded;
    s.expert_read_seconds = st.expert_cache.load_seconds;
    s.expert_wait_seconds = st.expert_cache.wait_seconds;
    s.expert_prefetches = st.expert_cache.prefetches;
    s.expert_prefetch_hits = st.expert_cache.prefetch_hits;
    s.expert_prefetch_wasted_bytes = st.expert_cache.prefetch_wasted_bytes;
    s.expert_predicted = st.expert_cache.predicted;
    s.expert_predicted_right = st.expert_cache.predicted_right;
    s.rerouted_choices = t.rerouted_choices;
    s.dropped_choices = t.dropped_choices;
    s.reweighted_choices = t.reweighted_choices;
    s.exchange_bytes = t.exchange_bytes;
    s.exchange_seconds = t.exchange_s;
    if (t.tokens > 0) {
      s.weight_bytes_per_token = static_cast<double>(t.active_weight_bytes) / t.tokens;
      s.multiply_adds_per_token = static_cast<double>(t.multiply_adds) / t.tokens;
    }
    return WriteVersioned(s, out, "stats");
  });
}

moe_status moe_context_get_expert_counts(const moe_context* ctx, int64_t* counts, size_t capacity,
                                         size_t* len) {
  return Guard("moe_context_get_expert_counts", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    const moe::HParams& h = ctx->engine->model()->hp();
    std::vector<int64_t> flat(h.n_layer * h.n_expert, 0);
    std::vector<std::vector<int64_t>> ec;
    if (absl::Status s =
            ctx->session->Inspect([&] { ec = ctx->session->stats().forward.expert_counts; });
        !s.ok()) {
      return FromStatus(s);
    }
    for (size_t l = 0; l < ec.size(); ++l) {
      for (size_t e = 0; e < ec[l].size(); ++e) flat[l * h.n_expert + e] = ec[l][e];
    }
    return CopyOut(flat.data(), flat.size(), sizeof(int64_t), counts, capacity, len, false);
  });
}

moe_status moe_context_disable_experts(moe_context* ctx, int32_t layer, const int32_t* experts,
                                       size_t n_experts) {
  return Guard("moe_context_disable_experts", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    if (experts == nullptr && n_experts > 0) return Null("experts");
    return FromStatus(ctx->session->SetDisabledExperts(
        layer, absl::MakeConstSpan(experts, experts == nullptr ? 0 : n_experts)));
  });
}

moe_status moe_context_metrics_text(const moe_context* ctx, char* buf, size_t capacity,
                                    size_t* len) {
  return Guard("moe_context_metrics_text", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    std::string text;
    if (absl::Status s = ctx->session->Inspect(
            [&] { text = moe::MetricsText(ctx->session->stats(), *ctx->engine); });
        !s.ok()) {
      return FromStatus(s);
    }
    return CopyOut(text.data(), text.size(), 1, buf, capacity, len, true);
  });
}

moe_status moe_context_set_routing_callback(moe_context* ctx, moe_routing_callback callback,
                                            void* user_data) {
  return Guard("moe_context_set_routing_callback", [&]() -> moe_status {
    if (ctx == nullptr) return Null("context");
    moe::Session::RoutingCallback told;
    if (callback != nullptr) {
      told = [callback, user_data](int64_t position, int layer, absl::Span<const int32_t> experts,
                                   absl::Span<const float> weights) {
        callback(static_cast<int32_t>(position), layer, experts.data(), weights.data(),
                 static_cast<int32_t>(experts.size()), user_data);
      };
    }
    return FromStatus(ctx->session->SetRoutingCallback(std::move(told)));
  });
}

}  // extern "C"

static_assert(static_cast<int>(moe::FinishReason::kEndOfGeneration) ==
                      MOE_FINISH_END_OF_GENERATION &&
                  static_cast<int>(moe::FinishReason::kMaxTokens) == MOE_FINISH_MAX_TOKENS &&
                  static_cast<int>(moe::FinishReason::kStopString) == MOE_FINISH_STOP_STRING &&
                  static_cast<int>(moe::FinishReason::kCallback) == MOE_FINISH_CALLBACK &&
                  static_cast<int>(moe::FinishReason::kContextFull) == MOE_FINISH_CONTEXT_FULL,
              "moe_finish_reason must mirror moe::FinishReason");
