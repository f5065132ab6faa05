/*
 * moe_c.h — the stable C ABI of libmoe, an embeddable Mixture-of-Experts inference runtime.
 *
 * This is the only public header. It compiles as C99 and as C++.
 *
 * Conventions (they hold for every function below unless its comment says otherwise):
 *
 *  - Status codes. Every function that can fail returns a moe_status. MOE_OK is 0; the other
 *    codes are pinned and never renumbered. moe_status_string() gives static text for a code;
 *    moe_last_error() gives a detailed message for the most recent failure ON THE CALLING THREAD
 *    (the message is thread-local, so it is valid even for failures that have no handle yet,
 *    such as a model that failed to load). A successful call does not clear it.
 *
 *  - Misuse is an error, never a crash: a NULL handle, NULL out-pointer, out-of-range token id
 *    or wrong struct_size returns MOE_ERROR_INVALID_ARGUMENT (or the code named below) and sets
 *    the message.
 *
 *  - Ownership. Each handle has exactly one create and one free function; freeing NULL is a
 *    no-op. Strings returned as `const char*` belong to the object they came from and stay valid
 *    until that object is freed (or, for per-call data, until the next call on it), unless the
 *    comment says they are static. Output buffers are owned by the caller.
 *
 *  - Caller buffers. Functions that write into a caller buffer take (buf, capacity, &len). They
 *    always store the size they need in *len; when capacity is too small they write nothing and
 *    return MOE_ERROR_BUFFER_TOO_SMALL, so a caller can ask once with capacity 0 and call again.
 *    Text outputs are NUL-terminated when there is room for the NUL; *len never counts it.
 *
 *  - Params structs. Get them from moe_*_default_params(), change what you need, and pass a
 *    pointer. Each carries struct_size, filled in by the default function from the header the
 *    caller compiled against, so fields can be appended in later versions without breaking
 *    compiled callers: fields past a caller's struct_size keep their defaults (or, in structs the
 *    library fills, are not written). A struct_size below the first published version's is
 *    INVALID_ARGUMENT. Passing NULL means "all defaults".
 *
 *  - Threads. A moe_model is immutable after loading: share it freely between threads and
 *    contexts. A moe_context is used by one thread at a time: every call on a context that
 *    overlaps another call on it (moe_decode, moe_generate*, moe_sample, moe_get_logits,
 *    moe_context_get_stats, moe_context_get_expert_counts, moe_context_reset/_truncate) returns
 *    MOE_ERROR_BUSY instead of corrupting it or reading what the running call writes. The
 *    exceptions: moe_context_cancel(), moe_context_n_past() and moe_context_n_ctx() may be called
 *    from any thread at any time; moe_context_free() may be called while a call runs on the
 *    context on another thread (it cancels that call, waits for it to return, then frees) or from
 *    that call's own token callback (the call then stops and frees the context as it returns).
 *    No call may START on a handle once its free has begun. moe_model_free() may be called while
 *    contexts and detokenizers made from the model are still in use: they keep what they need,
 *    and the model's memory is released when the last of them is freed.
 *
 *  - Callbacks receive the user_data pointer they were registered with as their last argument.
 *    They run on the thread that made the call. They must not call back into the same context.
 */
#ifndef MOE_C_H_
#define MOE_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(MOE_BUILDING_LIBRARY)
#define MOE_API __declspec(dllexport)
#else
#define MOE_API __declspec(dllimport)
#endif
#else
#define MOE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------------------------- */

#define MOE_VERSION_MAJOR 0
#define MOE_VERSION_MINOR 1
#define MOE_VERSION_PATCH 0
#define MOE_VERSION_STRING "0.1.0"
/* MAJOR*10000 + MINOR*100 + PATCH, for comparisons. */
#define MOE_VERSION_NUMBER (MOE_VERSION_MAJOR * 10000 + MOE_VERSION_MINOR * 100 + MOE_VERSION_PATCH)

/* The library's version at run time (static strings / values). Compare with the macros to check
 * that the header you compiled against matches the library you loaded. */
MOE_API const char* moe_version_string(void);
MOE_API int32_t moe_version_number(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------- */

typedef enum moe_status {
  MOE_OK = 0,
  MOE_ERROR_INVALID_ARGUMENT = 1, /* NULL where a value is needed, bad id, bad struct_size... */
  MOE_ERROR_NOT_FOUND = 2,        /* no such file, no such token or template */
  MOE_ERROR_IO = 3, /* the file could not be read or written; a link between ranks broke */
  MOE_ERROR_CORRUPT_MODEL = 4, /* truncated or damaged model file */
  MOE_ERROR_UNSUPPORTED = 5,   /* architecture, tensor type, template... not supported */
  MOE_ERROR_OUT_OF_RANGE = 6,  /* a value outside its valid range (e.g. token id) */
  MOE_ERROR_CONTEXT_FULL = 7,  /* the tokens do not fit in the context */
  MOE_ERROR_CANCELLED = 8,     /* stopped by moe_context_cancel() or a progress callback */
  MOE_ERROR_OUT_OF_MEMORY = 9,
  MOE_ERROR_BUFFER_TOO_SMALL = 10, /* *len says how much is needed */
  MOE_ERROR_BUSY = 11,             /* another thread is using this context */
  MOE_ERROR_INTERNAL = 12,         /* a bug: please report it with moe_last_error() */
  MOE_ERROR_NOT_READY = 13,        /* the request has not finished yet (moe_engine_try_wait) */
  MOE_ERROR_TIMEOUT = 14           /* the wait ran out (a request; a rank of a moe_dist world) */
} moe_status;

/* Static text for a status code ("invalid argument", ...); never NULL. */
MOE_API const char* moe_status_string(moe_status status);

/* The detailed message of the last failed call on this thread ("" if none). Valid until the
 * next failing call on this thread. */
MOE_API const char* moe_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Logging (silent by default)
 * ------------------------------------------------------------------------------------------- */

typedef enum moe_log_level {
  MOE_LOG_DEBUG = 0,
  MOE_LOG_INFO = 1,
  MOE_LOG_WARN = 2,
  MOE_LOG_ERROR = 3
} moe_log_level;

/* message is NUL-terminated, without a trailing newline, valid only during the call. */
typedef void (*moe_log_callback)(moe_log_level level, const char* message, void* user_data);

/* Installs a process-wide log callback for messages at min_level or above; NULL uninstalls it.
 * The callback may be called from any thread that calls into the library. */
MOE_API void moe_set_log_callback(moe_log_callback callback, moe_log_level min_level,
                                  void* user_data);

/* ---------------------------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------------------------- */

typedef struct moe_model moe_model;

/* Called during loading with progress in [0, 1]; return 0 to cancel the load (the load then
 * fails with MOE_ERROR_CANCELLED), non-zero to go on. */
typedef int (*moe_progress_callback)(float progress, void* user_data);

typedef struct moe_model_params {
  size_t struct_size;
  /* 0 (default): weights are copied once into process memory (huge pages where the kernel
   * allows): steady full speed, and the file may change on disk afterwards. 1: weights stay in
   * the memory-mapped file: instant start and pages shared between processes, but reads through
   * a cold or crowded page cache are slower. */
  int32_t use_mmap;
  moe_progress_callback progress_callback; /* may be NULL */
  void* progress_user_data;
  /* Fields below were appended after the first version: a caller compiled against an older
   * header passes a smaller struct_size, and they keep their defaults. */
  /* The expert cache: routed experts stay in the model file and are read on demand into a cache
   * of expert_cache_bytes, or of expert_cache_fraction (0 < f <= 1) of all expert bytes, as the
   * steps need them; everything else is loaded as usual. 0 and 0 (default): every expert
   * resident. .moe and GGUF files, and Hugging Face checkpoints whose experts are stored one
   * matrix per expert (read from their shards). Outputs are bit-identical to the resident run at
   * any budget; a budget below one layer's top-k experts fails the load with INVALID_ARGUMENT
   * naming the minimum, and a read error fails the call that needed the expert (the context
   * stays usable). */
  uint64_t expert_cache_bytes;
  double expert_cache_fraction;
  int32_t expert_eviction; /* moe_expert_eviction; MOE_EXPERT_EVICT_LRU (default) */
  int32_t
      expert_direct_io; /* 1 (default): direct I/O where the file system allows it; 0: buffered */
  /* A placement file (JSON; see docs/expert-cache.md): experts "resident" (read at
   * load, in memory outside the budget) or "pinned" (read at load, in the cache, never evicted);
   * the others are cached. NULL (default): none. Turns the expert cache on by itself. A malformed
   * file fails the load with INVALID_ARGUMENT naming the file and the place. */
  const char* expert_placement_path;
  /* 1 (default): while a layer runs, read the next layer's likely experts ahead (its router on
   * the current hidden state); 0: read only what steps ask for. Changes no result. */
  int32_t expert_prefetch;
  /* The memory the model may use, in bytes; 0 (default): what the system says is available at
   * load (MemAvailable, or the cgroup's limit if lower). When the weights copied into memory
   * would not fit, memory_fit says what happens. Mapped files (use_mmap) are not checked. */
  uint64_t memory_limit_bytes;
  int32_t memory_fit; /* moe_memory_fit; MOE_MEMORY_FIT_CACHE_EXPERTS (default) */
  /* A routing profile (moe-cli profile, moe_context_write_routing_profile): with the expert
   * cache, its most chosen experts are read at load into the cache's free slots, so the first
   * tokens do not stall on reads (see moe_model_warmup). NULL (default): none. */
  const char* expert_warmup_path;
  /* Where the model runs (moe_device). MOE_DEVICE_CPU (default); MOE_DEVICE_CUDA: a GPU, the
   * load failing with MOE_ERROR_UNSUPPORTED and the reason when none can be used (no device or
   * driver, a libmoe built without CUDA, libmoe_cuda.so missing beside libmoe.so);
   * MOE_DEVICE_AUTO: a GPU when one can be used, the CPU otherwise (moe_model_info.device says
   * which). On a GPU the weights are uploaded once, as stored in the file; routed experts beyond
   * gpu_memory_bytes stay in host memory and run on the CPU. The CUDA path has been compiled but
   * not yet run on a GPU: see the README. */
  int32_t device;
  int32_t gpu_index;         /* which CUDA device (default 0) */
  uint64_t gpu_memory_bytes; /* device memory the weights may take; 0: free memory less a reserve */
} moe_model_params;

typedef enum moe_device { MOE_DEVICE_CPU = 0, MOE_DEVICE_CUDA = 1, MOE_DEVICE_AUTO = 2 } moe_device;

typedef enum moe_memory_fit {
  /* Experts stay in the file and an expert cache is sized to what fits (the load logs it);
   * OUT_OF_MEMORY only if not even the other weights and one step's experts fit. */
  MOE_MEMORY_FIT_CACHE_EXPERTS = 0,
  MOE_MEMORY_FIT_ERROR = 1 /* the load fails with OUT_OF_MEMORY, naming the bytes needed */
} moe_memory_fit;

typedef enum moe_expert_eviction {
  MOE_EXPERT_EVICT_LRU = 0, /* the least recently used expert goes */
  MOE_EXPERT_EVICT_LFRU = 1 /* the least frequently used one (counts age), then the least recent */
} moe_expert_eviction;

/* Where an expert lives (moe_model_get_expert_placement). */
typedef enum moe_expert_tier {
  MOE_EXPERT_RESIDENT = 0, /* loaded with the model, always in memory */
  MOE_EXPERT_CACHED = 1,   /* read from the model file into the expert cache when a step needs it */
  MOE_EXPERT_PINNED = 2    /* in the expert cache and never evicted */
} moe_expert_tier;

/* Fills *params with defaults for a struct of struct_size bytes (use the macro-free inline
 * moe_model_default_params() below rather than calling this directly). */
MOE_API moe_status moe_model_params_init(moe_model_params* params, size_t struct_size);

static inline moe_model_params moe_model_default_params(void) {
  moe_model_params p;
  moe_model_params_init(&p, sizeof(p));
  return p;
}

/* Loads a model from a .moe container, a GGUF file or a Hugging Face checkpoint directory
 * (converted in memory). params may be NULL. On success *out_model is a new handle to free with
 * moe_model_free(). What a failure returns, by what path names:
 *   MOE_ERROR_NOT_FOUND         no such file or directory
 *   MOE_ERROR_IO                it exists but cannot be read (permissions, a read error)
 *   MOE_ERROR_INVALID_ARGUMENT  a directory that is not a checkpoint (no config.json)
 *   MOE_ERROR_UNSUPPORTED       a file of another kind (text, an image, random bytes), or one of
 *                               our formats with an architecture or tensor type not supported
 *   MOE_ERROR_CORRUPT_MODEL     a .moe or GGUF file that is damaged or truncated, and any file
 *                               too short to be told apart from one that was cut (the empty
 *                               file, a GGUF cut inside its magic, under 12 bytes of a .moe)
 * The message names the path and what is wrong. */
MOE_API moe_status moe_model_load(const char* path, const moe_model_params* params,
                                  moe_model** out_model);

/* Frees the model handle. Contexts and detokenizers created from it stay usable (they share the
 * weights); the memory goes when the last of them is freed. NULL is a no-op. */
MOE_API void moe_model_free(moe_model* model);

typedef struct moe_model_info {
  size_t struct_size;
  const char* architecture; /* "llama", "qwen2moe", "olmoe", "qwen3moe"; owned by the model */
  const char* name;         /* owned by the model; "" if none */
  int32_t n_layer;
  int32_t n_embd;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t n_expert;
  int32_t n_expert_used; /* top-k */
  int32_t n_vocab;
  int32_t n_ctx_train;
  int64_t n_params_total;
  int64_t n_params_active; /* per token: all but the routed experts a token does not select */
  int32_t bos_token;       /* -1 when the vocabulary has none */
  int32_t eos_token;
  int32_t eot_token;
  int32_t has_tokenizer;     /* 0: token ids only, text functions fail with UNSUPPORTED */
  int32_t has_chat_template; /* see moe_model_chat_template() */
  /* Appended after the first version (see moe_model_params). The weight bytes of the whole
   * model, and those this handle holds: all of them, or for a share loaded by
   * moe_dist_model_load the dense weights and its own experts (the counts above are the whole
   * model's). Pruned experts count in neither. */
  int64_t weight_bytes_total;
  int64_t weight_bytes_held;
  /* Appended: where the forward passes run, "cpu", "cpu (why no GPU)" after MOE_DEVICE_AUTO, or
   * "cuda:N NAME (what it holds)"; owned by the model. */
  const char* device;
} moe_model_info;

MOE_API moe_status moe_model_info_init(moe_model_info* info, size_t struct_size);

static inline moe_model_info moe_model_default_info(void) {
  moe_model_info i;
  moe_model_info_init(&i, sizeof(i));
  return i;
}

/* Fills *info (whose struct_size must be set, e.g. by moe_model_default_info()). */
MOE_API moe_status moe_model_get_info(const moe_model* model, moe_model_info* info);

/* The model's chat template (Jinja text), owned by the model; "" if it has none. NULL only
 * for a NULL model. */
MOE_API const char* moe_model_chat_template(const moe_model* model);

/* ---------------------------------------------------------------------------------------------
 * Tokens and text
 * ------------------------------------------------------------------------------------------- */

/* Flags for moe_tokenize. */
/* Prepend BOS when the vocabulary uses one. */
#define MOE_TOKENIZE_ADD_BOS 1u
/* Recognise control-token markup such as <|im_start|>; off by default so user text cannot
 * inject control tokens. */
#define MOE_TOKENIZE_PARSE_SPECIAL 2u

/* Tokenizes text_len bytes of UTF-8 text into tokens[0..capacity). Needs a tokenizer. */
MOE_API moe_status moe_tokenize(const moe_model* model, const char* text, size_t text_len,
                                uint32_t flags, int32_t* tokens, size_t capacity, size_t* n_tokens);

/* The text of n_tokens tokens, into buf[0..capacity). Control tokens are rendered as their text.
 * Not streaming-safe: use moe_detokenizer for text that arrives a token at a time. */
MOE_API moe_status moe_detokenize(const moe_model* model, const int32_t* tokens, size_t n_tokens,
                                  char* buf, size_t capacity, size_t* len);

/* Streaming detokenizer: feed tokens one at a time and get back only complete UTF-8 text (the
 * bytes of a character split across tokens are held until it completes). */
typedef struct moe_detokenizer moe_detokenizer;

MOE_API moe_status moe_detokenizer_create(const moe_model* model, moe_detokenizer** out);
MOE_API void moe_detokenizer_free(moe_detokenizer* detokenizer);
/* Appends the text completed by token (possibly empty) to buf; see "Caller buffers". When the
 * buffer is too small the token is NOT consumed: call again with a larger buffer. */
MOE_API moe_status moe_detokenizer_push(moe_detokenizer* detokenizer, int32_t token, char* buf,
                                        size_t capacity, size_t* len);

/* ---------------------------------------------------------------------------------------------
 * Chat templates
 * ------------------------------------------------------------------------------------------- */

typedef struct moe_chat_message {
  const char* role; /* "system", "user" or "assistant" */
  const char* content;
} moe_chat_message;

/* Formats a conversation with the model's chat template (template_name NULL) or a named one:
 * "chatml", "llama3", "mistral", "llama2", "zephyr", "deepseek", "plain" (a model trained on
 * plain text: the user's line, then the reply), "chatglm4" (GLM-4.5), "deepseek3", "gpt-oss"
 * (Harmony), "ernie4.5", "granite", "llama4", "bailing2" (Ling 2.0), "dots1", "hunyuan-moe"
 * (Hunyuan-A13B, whose user turns end with the reply's cue, as llama.cpp writes it). With
 * add_generation_prompt non-zero the text ends where the assistant's reply begins. BOS is not
 * included (generation adds it at the start of a context). A model template we do not recognise is
 * MOE_ERROR_UNSUPPORTED, a model without one MOE_ERROR_NOT_FOUND, an unknown template_name or
 * role MOE_ERROR_INVALID_ARGUMENT; each message names what it was given. */
MOE_API moe_status moe_chat_apply_template(const moe_model* model, const char* template_name,
                                           const moe_chat_message* messages, size_t n_messages,
                                           int32_t add_generation_prompt, char* buf,
                                           size_t capacity, size_t* len);

/* ---------------------------------------------------------------------------------------------
 * Contexts
 * ------------------------------------------------------------------------------------------- */

typedef struct moe_context moe_context;

/* MOE_KV_Q8_0: blocks of 32 values with one scale (a quarter of F32's bytes); the model's head
 * size must be a multiple of 32 (else INVALID_ARGUMENT). */
typedef enum moe_kv_type { MOE_KV_F32 = 0, MOE_KV_F16 = 1, MOE_KV_Q8_0 = 2 } moe_kv_type;

/* Noise on the router's logits that choose experts (moe_context_params.router_noise). */
typedef enum moe_router_noise {
  MOE_ROUTER_NOISE_NONE = 0,
  MOE_ROUTER_NOISE_GAUSSIAN = 1, /* standard deviation router_noise_scale */
  MOE_ROUTER_NOISE_GUMBEL = 2    /* scale router_noise_scale: at 1, top-k draws by probability */
} moe_router_noise;

typedef struct moe_context_params {
  size_t struct_size;
  int32_t n_ctx;     /* context length in tokens; 0 (default): the model's, at most 4096 */
  int32_t n_threads; /* 0 (default): one per core */
  int32_t kv_type;   /* moe_kv_type; MOE_KV_F32 (default) */
  uint64_t seed;     /* base seed of the samplers (default 0) */
  /* Dynamic top-k: each token keeps its best routed experts until they hold this share of its
   * top-k router scores (at least min_experts of them); the model's weights renormalise over
   * the kept ones when the model renormalises. 0 (default): always the model's top-k. In [0, 1]. */
  float expert_confidence;
  int32_t min_experts; /* with expert_confidence: at least this many experts (default 1, >= 1) */
  /* The router's logits are divided by router_temperature before gating (default 1: as the
   * model routes; > 0). router_noise (moe_router_noise) adds noise to the logits that choose the
   * experts, not to those that weight them, drawn from a hash of (router_noise_seed, layer,
   * position, expert): reproducible, and a token's the same in any batch. Default: none. */
  float router_temperature;
  int32_t router_noise;
  float router_noise_scale;
  uint64_t router_noise_seed;
  /* Capacity with re-routing: in one forward step of n tokens (a prompt chunk; a single decode
   * token is never capped) no expert takes more than ceil(expert_capacity_factor x n x k /
   * n_expert) of them; tokens claim experts in order, and one whose choice is full takes its
   * next best expert with room (moe_stats.rerouted_choices) or, when none has room, runs fewer
   * (dropped_choices). 0 (default): no cap; >= 0. */
  float expert_capacity_factor;
  /* Load-aware re-weighting: over the load_window tokens before each one, an expert that took
   * more than load_limit x its fair share (1 / n_expert) of a layer's choices has its weight
   * scaled down by the excess, the token's other experts' weights up to keep their sum; the
   * layer's choice of experts does not change (moe_stats.reweighted_choices). load_window 0
   * (default): off, >= 0; load_limit default 2, >= 1. */
  int32_t load_window;
  float load_limit;
} moe_context_params;

MOE_API moe_status moe_context_params_init(moe_context_params* params, size_t struct_size);

static inline moe_context_params moe_context_default_params(void) {
  moe_context_params p;
  moe_context_params_init(&p, sizeof(p));
  return p;
}

/* A new context (conversation state: KV cache, sampler) over model. params may be NULL. The
 * context keeps the model's weights alive: the model handle may be freed first. */
MOE_API moe_status moe_context_create(moe_model* model, const moe_context_params* params,
                                      moe_context** out_context);
/* Frees the context; NULL is a no-op. Safe while a call runs on it (see "Threads"): that call is
 * cancelled and returns MOE_ERROR_CANCELLED first. */
MOE_API void moe_context_free(moe_context* context);

/* Restores what a fresh context has: no tokens, no logits or statistics, and the samplers'
 * random streams from the start, so the same seeds and inputs give a fresh context's output. */
MOE_API moe_status moe_context_reset(moe_context* context);
/* Keeps the first n_keep tokens and forgets the rest (e.g. to regenerate an answer). The
 * samplers' streams go on (a regenerated answer is a new draw); moe_generate* with an empty prompt
 * then continues from the last kept token. */
MOE_API moe_status moe_context_truncate(moe_context* context, int32_t n_keep);
/* Tokens currently in the context (-1 for a NULL context). During a call on another thread,
 * some count that call has reached. */
MOE_API int32_t moe_context_n_past(const moe_context* context);
/* The context length (-1 for a NULL context). */
MOE_API int32_t moe_context_n_ctx(const moe_context* context);

/* Requests that the call running on this context (moe_decode, moe_generate) stop as soon as
 * possible; that call returns MOE_ERROR_CANCELLED. Safe from any thread at any time, including
 * during a long prompt; does nothing if no call is running. Tokens fully processed before the
 * cancellation stay in the context, which remains usable. */
MOE_API moe_status moe_context_cancel(moe_context* context);

/* ---------------------------------------------------------------------------------------------
 * Sampling
 * ------------------------------------------------------------------------------------------- */

typedef struct moe_logit_bias {
  int32_t token;
  float bias; /* added to the token's logit; -INFINITY bans it */
} moe_logit_bias;

typedef struct moe_sampling_params {
  size_t struct_size;
  float temperature;                /* <= 0: greedy (argmax, lowest id on ties). Default 0.8 */
  int32_t top_k;                    /* <= 0: off. Default 40 */
  float top_p;                      /* >= 1: off. Default 0.95 */
  float min_p;                      /* <= 0: off. Default 0.05 */
  float repeat_penalty;             /* 1: off (default) */
  float frequency_penalty;          /* 0: off (default) */
  float presence_penalty;           /* 0: off (default) */
  int32_t penalty_last_n;           /* tokens the penalties look back over; -1: all. Default 64 */
  const moe_logit_bias* logit_bias; /* may be NULL; read during the call only */
  size_t n_logit_bias;
  uint64_t seed; /* added to the context's seed: same seeds and inputs, same output */
} moe_sampling_params;

MOE_API moe_status moe_sampling_params_init(moe_sampling_params* params, size_t struct_size);

static inline moe_sampling_params moe_sampling_default_params(void) {
  moe_sampling_params p;
  moe_sampling_params_init(&p, sizeof(p));
  return p;
}

/* ---------------------------------------------------------------------------------------------
 * Low-level generation: decode tokens, read logits, sample
 * ------------------------------------------------------------------------------------------- */

/* Appends n_tokens tokens to the context and computes the logits of the last one. */
MOE_API moe_status moe_decode(moe_context* context, const int32_t* tokens, size_t n_tokens);

/* The logits of the last decoded token: *logits points to *n_vocab floats owned by the context,
 * valid until the next call on it. */
MOE_API moe_status moe_get_logits(moe_context* context, const float** logits, int32_t* n_vocab);

/* Samples a token from the current logits (does not append it: moe_decode it to continue).
 * params may be NULL (defaults). */
MOE_API moe_status moe_sample(moe_context* context, const moe_sampling_params* params,
                              int32_t* out_token);

/* ---------------------------------------------------------------------------------------------
 * One-call generation with streaming
 * ------------------------------------------------------------------------------------------- */

/* Called for each generated token with the text it completes: piece[0..piece_len) is valid
 * UTF-8, possibly empty (a character or a possible stop string still incomplete), and NOT
 * NUL-terminated. token is -1 for a final call that only flushes held-back text. Return non-zero
 * to go on, 0 to stop. */
typedef int (*moe_token_callback)(int32_t token, const char* piece, size_t piece_len,
                                  void* user_data);

typedef enum moe_finish_reason {
  MOE_FINISH_NONE = 0,
  MOE_FINISH_END_OF_GENERATION = 1, /* the model ended its turn (EOS/EOT) */
  MOE_FINISH_MAX_TOKENS = 2,
  MOE_FINISH_STOP_STRING = 3,
  MOE_FINISH_CALLBACK = 4,     /* the token callback returned 0 */
  MOE_FINISH_CONTEXT_FULL = 5, /* the context (or the engine's KV cache) filled up */
  MOE_FINISH_CANCELLED = 6,    /* engine requests: moe_engine_cancel, or the engine was freed */
  MOE_FINISH_ERROR = 7         /* engine requests: the step failed (the event's status says why) */
} moe_finish_reason;

typedef struct moe_generate_params {
  size_t struct_size;
  const moe_sampling_params* sampling; /* NULL (default): moe_sampling_default_params() */
  int32_t max_tokens;                  /* default 256 */
  const char* const* stop;             /* stop strings (not included in the output); may be NULL */
  size_t n_stop;
  int32_t parse_special; /* recognise control-token markup in the prompt; default 0 */
} moe_generate_params;

MOE_API moe_status moe_generate_params_init(moe_generate_params* params, size_t struct_size);

static inline moe_generate_params moe_generate_default_params(void) {
  moe_generate_params p;
  moe_generate_params_init(&p, sizeof(p));
  return p;
}

/* Appends the prompt to the context (BOS first when the context is empty and the vocabulary
 * uses one) and generates until end of generation, max_tokens, a stop string, the callback
 * returning 0, or a full context. Everything already in the context is reused: to continue a
 * conversation, call again with only the new turn's text. A prompt that does not leave room to
 * generate fails with MOE_ERROR_CONTEXT_FULL before anything is processed. params and callback
 * may be NULL. */
MOE_API moe_status moe_generate(moe_context* context, const char* prompt,
                                const moe_generate_params* params, moe_token_callback callback,
                                void* user_data);

/* The same with prompt token ids, used exactly as given: no BOS is added, on an empty context
 * too (pass it first yourself, e.g. from moe_tokenize with MOE_TOKENIZE_ADD_BOS). With n_prompt 0
 * it continues from what the context holds (an empty context is MOE_ERROR_INVALID_ARGUMENT). */
MOE_API moe_status moe_generate_tokens(moe_context* context, const int32_t* prompt, size_t n_prompt,
                                       const moe_generate_params* params,
                                       moe_token_callback callback, void* user_data);

/* ---------------------------------------------------------------------------------------------
 * Experts as placed units (the expert cache; see moe_model_params)
 * ------------------------------------------------------------------------------------------- */

typedef struct moe_expert_placement {
  size_t struct_size;
  int32_t tier;      /* moe_expert_tier; every expert is MOE_EXPERT_RESIDENT without the cache */
  int32_t in_memory; /* 1: its weights are in memory now */
  uint64_t bytes;    /* its gate, up and down matrices as the model file stores them */
  char weight_types[32]; /* their types as stored, "gate/up/down" (ungated: "up/down"), e.g.
                            "Q4_K/Q4_K/Q6_K" */
} moe_expert_placement;

MOE_API moe_status moe_expert_placement_init(moe_expert_placement* placement, size_t struct_size);

static inline moe_expert_placement moe_default_expert_placement(void) {
  moe_expert_placement p;
  moe_expert_placement_init(&p, sizeof(p));
  return p;
}

/* Fills *placement (struct_size set, e.g. by moe_default_expert_placement()) for one expert;
 * OUT_OF_RANGE for a layer or expert the model does not have. */
MOE_API moe_status moe_model_get_expert_placement(const moe_model* model, int32_t layer,
                                                  int32_t expert, moe_expert_placement* placement);

/* Keeps a cached expert in memory (reading it now) until unpinned; it counts against the cache's
 * budget, which keeps room for one step's experts besides (OUT_OF_MEMORY when it would not).
 * Pinning a resident or pinned expert changes nothing. Thread-safe; contexts may be running. */
MOE_API moe_status moe_model_pin_expert(moe_model* model, int32_t layer, int32_t expert);
/* A pinned expert becomes cached again; a resident one cannot (INVALID_ARGUMENT). */
MOE_API moe_status moe_model_unpin_expert(moe_model* model, int32_t layer, int32_t expert);

/* Reads the routing profile at profile_path and fills the expert cache's free slots with its most
 * chosen experts (never evicting); *n_read (may be NULL) says how many were read, 0 when every
 * expert is resident. A profile for another model, or malformed, is INVALID_ARGUMENT. */
MOE_API moe_status moe_model_warmup(moe_model* model, const char* profile_path, size_t* n_read);

/* Writes the expert counts of the last moe_decode / moe_generate call on a context as a routing
 * profile (JSON) to path: warm-up data from the application's own traffic. */
MOE_API moe_status moe_context_write_routing_profile(const moe_context* context, const char* path);

/* The expert cache per layer during the last moe_decode / moe_generate call on a context (the
 * cache is shared by the model's contexts: their calls at the same time count too). All zero
 * when every expert is resident. This struct is not versioned: fields are never added to it. */
typedef struct moe_expert_layer_stats {
  int64_t hits;                  /* the call's experts found in memory (or already being read) */
  int64_t misses;                /* the call's experts read from the file */
  int64_t bytes_read;            /* from the model file, misses and prefetches */
  double read_seconds;           /* on the I/O threads */
  double wait_seconds;           /* compute waiting for reads */
  int64_t prefetches;            /* experts read ahead by pre-gating */
  int64_t prefetch_hits;         /* of those, the ones a step then used */
  int64_t prefetch_wasted_bytes; /* read ahead and evicted unused */
  int64_t predicted;             /* experts the layer used while a guess was out for it */
  int64_t predicted_right;       /* of those, the ones the guess named */
  int32_t experts_in_memory;     /* this layer's experts in memory when the call ended */
} moe_expert_layer_stats;

/* One moe_expert_layer_stats per layer into layers[0..capacity); see "Caller buffers" (*len
 * counts layers). */
MOE_API moe_status moe_context_get_expert_layer_stats(const moe_context* context,
                                                      moe_expert_layer_stats* layers,
                                                      size_t capacity, size_t* len);

/* ---------------------------------------------------------------------------------------------
 * Statistics of the last moe_decode / moe_generate call on a context
 * ------------------------------------------------------------------------------------------- */

typedef struct moe_stats {
  size_t struct_size;
  int32_t prompt_tokens;
  int32_t generated_tokens;
  double prompt_seconds;
  double generate_seconds;
  double prompt_tokens_per_second;
  double generate_tokens_per_second;
  /* Time per stage, summed over the call. */
  double attention_seconds;
  double router_seconds;
  double experts_seconds;
  double head_seconds;
  double sampling_seconds;
  /* Measured from the experts that actually fired: mean parameters touched per token and their
   * fraction of all parameters. */
  double active_params_per_token;
  double active_fraction;
  double mean_router_entropy; /* nats, per token and layer */
  int64_t weight_bytes_read;
  int32_t finish_reason; /* moe_finish_reason */
  /* Appended after the first version (see moe_model_params). The model's expert cache during the
   * call (it is shared by the model's contexts: their calls at the same time count too); 0 when
   * every expert is resident. */
  int64_t expert_cache_hits;
  int64_t expert_cache_misses;
  int64_t expert_bytes_read; /* from the model file */
  double expert_read_seconds;
  /* Appended in the second version; summed over layers as moe_expert_layer_stats. */
  double expert_wait_seconds;
  int64_t expert_prefetches;
  int64_t expert_prefetch_hits;
  int64_t expert_prefetch_wasted_bytes;
  int64_t expert_predicted;
  int64_t expert_predicted_right;
  /* Appended in the third version: the routing policies at work, over tokens and layers
   * (moe_context_params' capacity and load-aware re-weighting). */
  int64_t rerouted_choices;
  int64_t dropped_choices;
  int64_t reweighted_choices;
  /* What a token cost on average in the call: the weight bytes its computation touched (dense
   * matrices, its routed experts, the output head where logits were computed) and the
   * multiply-adds of the matrix products and attention. */
  double weight_bytes_per_token;
  double multiply_adds_per_token;
  /* Appended in the fourth version: over a moe_dist world, the bytes rank 0 sent to and received
   * from the other ranks (expert outputs; with moe_dist_placement.dense_on_rank0 also the MoE
   * layers' inputs it sends), and the time its exchanges took (waiting for slower ranks
   * included); 0 for a context of one process. */
  int64_t exchange_bytes;
  double exchange_seconds;
} moe_stats;

MOE_API moe_status moe_stats_init(moe_stats* stats, size_t struct_size);

static inline moe_stats moe_default_stats(void) {
  moe_stats s;
  moe_stats_init(&s, sizeof(s));
  return s;
}

/* Fills *stats (whose struct_size must be set, e.g. by moe_default_stats()). */
MOE_API moe_status moe_context_get_stats(const moe_context* context, moe_stats* stats);

/* How many tokens chose each expert in the last call, as [n_layer x n_expert] row-major into
 * counts[0..capacity); see "Caller buffers" (*len counts elements). */
MOE_API moe_status moe_context_get_expert_counts(const moe_context* context, int64_t* counts,
                                                 size_t capacity, size_t* len);

/* Switches experts of one MoE layer off for this context's later calls (a setting: kept by
 * moe_context_reset): the router never picks them and takes the best of the others instead, the
 * weights keeping their meaning over all experts. experts[0..n_experts) replaces the layer's set;
 * n_experts = 0 switches the layer's experts all back on. MOE_ERROR_INVALID_ARGUMENT for a layer
 * without routed experts (or out of range), an expert id out of range, or a set that would leave
 * the layer no expert; MOE_ERROR_BUSY while a call runs on the context. */
MOE_API moe_status moe_context_disable_experts(moe_context* context, int32_t layer,
                                               const int32_t* experts, size_t n_experts);

/* The last call's statistics in the Prometheus text exposition format (version 0.0.4), into
 * buf[0..capacity); see "Caller buffers". Families: moe_call_tokens and
 * moe_call_tokens_per_second (by phase), moe_call_stage_seconds (by stage),
 * moe_router_entropy_nats, moe_experts_per_token, moe_active_params_per_token,
 * moe_active_fraction, moe_weight_bytes_per_token, moe_expert_utilisation_stddev and
 * moe_expert_jain_fairness (by layer), moe_expert_cache_lookups (by result),
 * moe_expert_cache_hit_ratio. A service adds the text to what its /metrics endpoint serves. */
MOE_API moe_status moe_context_metrics_text(const moe_context* context, char* buf, size_t capacity,
                                            size_t* len);

/* The routing trace: told, during later calls on the context (moe_decode, moe_generate*), each
 * token's routing as the context processes it — its position, the MoE layer, the experts it ran
 * (best first) and their weights, n_experts of each (the model's top-k; -1 and 0 where the token
 * ran fewer, under a routing policy or masked experts). A step tells layer 0 for all its tokens,
 * then layer 1, ...; dense layers tell nothing. Runs on the thread making the call; the arrays
 * are valid during the callback only, and it must not call into this context. */
typedef void (*moe_routing_callback)(int32_t position, int32_t layer, const int32_t* experts,
                                     const float* weights, int32_t n_experts, void* user_data);
/* Sets (or, with NULL, removes) the context's routing callback. MOE_ERROR_BUSY while a call runs
 * on the context. */
MOE_API moe_status moe_context_set_routing_callback(moe_context* context,
                                                    moe_routing_callback callback, void* user_data);

/* ---------------------------------------------------------------------------------------------
 * The batching engine: many requests at once
 *
 * An engine serves any number of requests over one model. Each step runs the new tokens of every
 * running request in one batched pass (a decode token for each generating request, and chunks of
 * prompts within a token budget), so an expert that several requests chose is read once for all.
 * Requests keep their K/V in one paged cache; a prompt that starts with full blocks of tokens an
 * earlier request computed (a shared system prompt) reuses them instead of computing them again.
 * When the cache cannot grow, the youngest running request is preempted (its blocks freed, its
 * tokens computed again later; its output is unchanged) or, as the params say, the request that
 * needs room finishes with MOE_FINISH_CONTEXT_FULL.
 *
 * Threads: moe_engine_submit, _cancel, _wait, _try_wait and _get_stats may be called from any
 * thread at any time. Callbacks run on the thread that steps the engine: its own scheduler
 * thread (own_thread = 1, the default), or whichever thread calls moe_engine_step. A callback may
 * call moe_engine_submit, _cancel, _try_wait and _get_stats; moe_engine_wait on an unfinished
 * request and moe_engine_step return MOE_ERROR_INVALID_ARGUMENT from a callback (they could never
 * return), and moe_engine_free from a callback is refused (logged, nothing freed). Keep callbacks
 * short: the step waits for them.
 * ------------------------------------------------------------------------------------------- */

typedef struct moe_engine moe_engine;
typedef struct moe_request_result moe_request_result;
typedef uint64_t moe_request_id; /* 0 is never an id */

typedef enum moe_kv_full_policy {
  MOE_KV_FULL_PREEMPT = 0, /* free the youngest request's blocks; it is computed again later */
  MOE_KV_FULL_FINISH = 1   /* the request that needs room finishes with MOE_FINISH_CONTEXT_FULL */
} moe_kv_full_policy;

typedef struct moe_engine_params {
  size_t struct_size;
  int32_t n_threads;       /* 0 (default): one per core */
  int32_t kv_type;         /* moe_kv_type; MOE_KV_F16 (default) */
  int32_t kv_block_size;   /* positions per KV block, a power of two; default 32 */
  int32_t n_ctx;           /* the most tokens one request holds; 0 (default): the model's, <= 4096 */
  int64_t kv_tokens;       /* the KV cache's size in tokens; 0 (default): 16384, or n_ctx if larger */
  int64_t kv_bytes;        /* > 0: the KV cache's size in bytes instead */
  int32_t max_sequences;   /* requests running at once; default 16 */
  int32_t max_step_tokens; /* tokens one step computes, decode tokens first; default 256 */
  /* 1 (default): prompts start from cached blocks of a shared prefix. Recurrent models (Mamba-2,
   * gated delta nets, short convolutions) then keep two state slots a request, one for the
   * snapshots a prefix starts from; with 0, one. */
  int32_t prefix_sharing;
  int32_t when_kv_full;    /* moe_kv_full_policy; default MOE_KV_FULL_PREEMPT */
  int32_t own_thread;      /* 1 (default): the engine steps on its own thread; 0: moe_engine_step */
  uint64_t seed;           /* added to every request's sampling seed; default 0 */
  /* Every request's dynamic top-k, as moe_context_params' (0 (default): the model's top-k). */
  float expert_confidence;
  int32_t min_experts; /* default 1 */
  /* Every request's router temperature and noise, as moe_context_params'. */
  float router_temperature; /* default 1 */
  int32_t router_noise;
  float router_noise_scale;
  uint64_t router_noise_seed;
  /* As moe_context_params': the capacity caps each step over all the requests in it; load-aware
   * re-weighting follows each request's own tokens (and turns prefix sharing off, since cached
   * blocks do not keep the routing). */
  float expert_capacity_factor; /* default 0: no cap */
  int32_t load_window;          /* default 0: off */
  float load_limit;             /* default 2 */
} moe_engine_params;

MOE_API moe_status moe_engine_params_init(moe_engine_params* params, size_t struct_size);

static inline moe_engine_params moe_engine_default_params(void) {
  moe_engine_params p;
  moe_engine_params_init(&p, sizeof(p));
  return p;
}

/* A new engine over model (params may be NULL). It keeps the model's weights alive. */
MOE_API moe_status moe_engine_create(moe_model* model, const moe_engine_params* params,
                                     moe_engine** out_engine);
/* Finishes every request left as MOE_FINISH_CANCELLED (their callbacks are told, and threads
 * waiting on them return), stops the scheduler thread and frees the engine; NULL is a no-op. No
 * call may start on the engine once its free has begun. */
MOE_API void moe_engine_free(moe_engine* engine);

typedef struct moe_request_params {
  size_t struct_size;
  const char* prompt;            /* text; BOS is added as the vocabulary wants. Or: */
  const int32_t* tokens;         /* token ids, used as given, when n_tokens > 0 */
  size_t n_tokens;
  const moe_generate_params* generate; /* sampling, max_tokens, stop strings; NULL: defaults */
  int32_t keep_result; /* 1 (default): the result waits for moe_engine_wait; 0: callback only */
} moe_request_params;

MOE_API moe_status moe_request_params_init(moe_request_params* params, size_t struct_size);

static inline moe_request_params moe_request_default_params(void) {
  moe_request_params p;
  moe_request_params_init(&p, sizeof(p));
  return p;
}

/* What a request's callback receives, valid during the call only: a generated token and the text
 * it completes (piece[0..piece_len), valid UTF-8, possibly empty, not NUL-terminated), or, once
 * per request and last, its finish (token -1, the text still held back, the reason, for
 * MOE_FINISH_ERROR / _CANCELLED the status and message, and the whole result: read it with the
 * moe_request_result_* functions during the call; do not free it). */
typedef struct moe_request_event {
  size_t struct_size;
  moe_request_id request;
  int32_t token;
  const char* piece;
  size_t piece_len;
  int32_t finish_reason; /* moe_finish_reason; MOE_FINISH_NONE until the last event */
  int32_t status;        /* moe_status of the last event */
  const char* message;   /* its message; "" when OK */
  const moe_request_result* result; /* the last event: the request's result; NULL before */
} moe_request_event;

/* Return non-zero to go on, 0 to end this request (MOE_FINISH_CALLBACK); the others go on. */
typedef int (*moe_request_callback)(const moe_request_event* event, void* user_data);

/* Queues a request and returns its id at once (callback may be NULL). Errors: a bad parameter, a
 * prompt that can never fit (MOE_ERROR_CONTEXT_FULL: past n_ctx, or past the whole KV cache). */
MOE_API moe_status moe_engine_submit(moe_engine* engine, const moe_request_params* params,
                                     moe_request_callback callback, void* user_data,
                                     moe_request_id* out_id);
/* Ends the request at the next step boundary (its blocks freed); it finishes as
 * MOE_FINISH_CANCELLED. MOE_OK and nothing for a finished request, NOT_FOUND for an id never given. */
MOE_API moe_status moe_engine_cancel(moe_engine* engine, moe_request_id request);
/* Blocks until the request has finished and hands its result over (*out_result, freed with
 * moe_request_result_free; a second wait is NOT_FOUND). timeout_seconds < 0: no limit; when it
 * runs out, MOE_ERROR_TIMEOUT. Requests submitted with keep_result = 0 keep no result
 * (INVALID_ARGUMENT). */
MOE_API moe_status moe_engine_wait(moe_engine* engine, moe_request_id request,
                                   double timeout_seconds, moe_request_result** out_result);
/* The same without blocking: MOE_ERROR_NOT_READY while the request runs. */
MOE_API moe_status moe_engine_try_wait(moe_engine* engine, moe_request_id request,
                                       moe_request_result** out_result);
/* Engines with own_thread = 0: runs one step on the calling thread (callbacks run in it);
 * *did_work (may be NULL) is 0 when there was nothing to do. */
MOE_API moe_status moe_engine_step(moe_engine* engine, int32_t* did_work);

typedef struct moe_request_stats {
  size_t struct_size;
  int32_t finish_reason; /* moe_finish_reason */
  int32_t status;        /* moe_status: MOE_OK, MOE_ERROR_CANCELLED, or why the step failed */
  int32_t prompt_tokens;
  int32_t prefix_tokens_reused; /* prompt positions taken from cached blocks */
  int32_t generated_tokens;
  int32_t preemptions;
  double queue_seconds;       /* submitted until first scheduled */
  double first_token_seconds; /* submitted until the first token was sampled */
  double total_seconds;
  double decode_tokens_per_second; /* after the first token */
  /* Appended: what the request's tokens cost — the weight bytes their computation touched (the
   * dense matrices, the routed experts each token chose, the output head where logits were
   * computed) and the multiply-adds of the matrix products and attention — over every token its
   * steps computed (prompt, decode, recomputation after preemption), and per decode step. */
  int64_t weight_bytes;
  int64_t multiply_adds;
  double decode_weight_bytes_per_token;
  double decode_multiply_adds_per_token;
} moe_request_stats;

MOE_API moe_status moe_request_stats_init(moe_request_stats* stats, size_t struct_size);

static inline moe_request_stats moe_default_request_stats(void) {
  moe_request_stats s;
  moe_request_stats_init(&s, sizeof(s));
  return s;
}

/* A finished request's generated text (NUL-terminated, owned by the result), its token ids
 * (*n_tokens of them, owned by the result), its statistics, and the message of its status ("" when
 * OK). */
MOE_API const char* moe_request_result_text(const moe_request_result* result);
MOE_API const int32_t* moe_request_result_tokens(const moe_request_result* result,
                                                 size_t* n_tokens);
MOE_API moe_status moe_request_result_get_stats(const moe_request_result* result,
                                                moe_request_stats* stats);
MOE_API const char* moe_request_result_message(const moe_request_result* result);
MOE_API void moe_request_result_free(moe_request_result* result);

typedef struct moe_engine_stats {
  size_t struct_size;
  int64_t submitted;
  int64_t finished;
  int64_t running;
  int64_t waiting;
  int64_t steps;
  int64_t tokens;        /* computed by the steps, prompt and decode */
  int64_t decode_tokens; /* of them, one per generating request and step */
  int64_t prefix_tokens_reused;
  int64_t preemptions;
  int32_t kv_blocks;
  int32_t kv_blocks_in_use;
  int32_t kv_blocks_cached; /* unreferenced full blocks kept for prefixes to reuse */
  int32_t kv_block_size;
  double step_seconds;
  double mean_sequences_per_step;
  double mean_tokens_per_step;
  double mean_experts_per_step; /* distinct experts a step ran, per layer */
  /* Appended: the routing policies at work over every step, as moe_stats'. */
  int64_t rerouted_choices;
  int64_t dropped_choices;
  int64_t reweighted_choices;
  /* Appended: the sliding-window layers' own blocks (0 when no layer slides), which hold only
   * each request's window; cached ones keep the windows of shared prefixes. kv_blocks counts the
   * other layers' blocks. */
  int32_t kv_window_blocks;
  int32_t kv_window_blocks_in_use;
  int32_t kv_window_blocks_cached;
  int64_t kv_bytes; /* the paged KV cache's memory */
  /* Appended: an engine over ranks (moe_dist_engine_create): the bytes of layer inputs and expert
   * outputs rank 0 exchanged with the others, and the time it spent in those exchanges. */
  int64_t exchange_bytes;
  double exchange_seconds;
  /* Appended: the convolution layers' slots (0 when no layer convolves: LFM2's short convolutions,
   * Mamba-2 and gated delta nets), each a layer's last convolution inputs and recurrent state: a
   * live one per running request, and snapshots of what followed a block's last position; cached
   * ones end shared prefixes. */
  int32_t kv_state_slots;
  int32_t kv_state_slots_in_use;
  int32_t kv_state_slots_cached;
} moe_engine_stats;

MOE_API moe_status moe_engine_stats_init(moe_engine_stats* stats, size_t struct_size);

/* Switches experts of one MoE layer off for every request of the engine from its next step on, as
 * moe_context_disable_experts does for a context: experts[0..n_experts) replaces the layer's set;
 * n_experts = 0 switches them all back on. MOE_ERROR_INVALID_ARGUMENT for a layer without routed
 * experts, an id out of range, or a set that would leave the layer no expert. Any thread. */
MOE_API moe_status moe_engine_disable_experts(moe_engine* engine, int32_t layer,
                                              const int32_t* experts, size_t n_experts);

/* The engine's statistics since its creation in the Prometheus text exposition format (0.0.4),
 * into buf[0..capacity); see "Caller buffers". Counters: moe_engine_requests_submitted_total,
 * _requests_finished_total, _steps_total, _tokens_total, _decode_tokens_total,
 * _prefix_tokens_reused_total, _preemptions_total; gauges: moe_engine_requests (by state),
 * moe_engine_kv_blocks (by state), and the step averages. Safe from any thread. */
MOE_API moe_status moe_engine_metrics_text(const moe_engine* engine, char* buf, size_t capacity,
                                           size_t* len);

static inline moe_engine_stats moe_default_engine_stats(void) {
  moe_engine_stats s;
  moe_engine_stats_init(&s, sizeof(s));
  return s;
}

MOE_API moe_status moe_engine_get_stats(const moe_engine* engine, moe_engine_stats* stats);

/* ---------------------------------------------------------------------------------------------
 * Expert parallelism over processes and nodes (MPI)
 *
 * A model too large for one machine runs over several processes launched by mpirun (one per node,
 * or several on one): each loads the weights every token needs and only its share of the routed
 * experts, and each MoE layer exchanges the experts' outputs between them. Rank 0 drives: it
 * creates the context and calls moe_decode / moe_generate* as usual (or, with the dense weights
 * on rank 0 only, a batching engine: moe_dist_engine_create); every other rank calls
 * moe_dist_serve, which runs rank 0's steps until rank 0 frees its moe_dist. Rank 0's logits and
 * tokens are those of one process holding every expert, bit for bit. A rank that dies or a
 * network that breaks makes the calls waiting on it fail with MOE_ERROR_TIMEOUT after the
 * timeout, on every rank, instead of hanging; the world cannot be used after that.
 *
 *   moe_dist* d; moe_dist_create(60000, &d);
 *   moe_model* m; moe_dist_model_load(d, "model.moe", NULL, NULL, &m);
 *   if (moe_dist_rank(d) == 0) { moe_context* c; moe_dist_context_create(d, m, NULL, &c);
 *                                ...generate...; moe_context_free(c); }
 *   else moe_dist_serve(d, m, 0, 0);
 *   moe_model_free(m); moe_dist_free(d);       (rank 0's free ends the others' serve)
 *
 * Libraries built without MPI return MOE_ERROR_UNSUPPORTED from moe_dist_create. A world is used
 * by one thread at a time: calls on its context, moe_dist_stop_serving and moe_dist_free must not
 * overlap (the ranks must see the same sequence of steps).
 * ------------------------------------------------------------------------------------------- */
typedef struct moe_dist moe_dist;

/* Joins the world this process was launched into by mpirun (a process started alone is a world
 * of one). Starts MPI unless the caller did (then it must have asked for MPI_THREAD_SERIALIZED or
 * more), and ends it when the last moe_dist goes. timeout_ms: how long one exchange may wait for
 * the other ranks (> 0; 60000 is a good default). */
MOE_API moe_status moe_dist_create(int32_t timeout_ms, moe_dist** out_dist);
/* This process's rank and the number of ranks (-1 for a NULL handle). */
MOE_API int32_t moe_dist_rank(const moe_dist* dist);
MOE_API int32_t moe_dist_size(const moe_dist* dist);
/* Loads this rank's share of the model at path, as moe_model_load does (params may be NULL):
 * every rank must load the same file. The routed experts are spread round robin, or, with a
 * routing profile (moe-cli profile), balanced by its measured load (NULL: round robin). The
 * handle serves moe_dist_context_create (rank 0) or moe_dist_serve (the others) only. */
MOE_API moe_status moe_dist_model_load(moe_dist* dist, const char* path,
                                       const moe_model_params* params,
                                       const char* balance_profile_path, moe_model** out_model);
/* Where a model's parts go over the ranks of a world (moe_dist_model_load_placed). Size-versioned:
 * fill it with moe_dist_placement_init / moe_dist_default_placement() first. */
typedef struct moe_dist_placement {
  size_t struct_size;
  /* A routing profile (moe-cli profile): the routed experts are balanced by its measured load
   * instead of round robin. NULL: round robin. */
  const char* balance_profile_path;
  /* With a profile: each routed layer's this many most chosen experts get a second rank, which
   * takes half of their tokens (0: none). */
  int32_t expert_replicas;
  /* Nonzero: only rank 0 holds the weights every token needs (attention, norms, routers, shared
   * experts, embedding, head) and sends each MoE layer's inputs to the others, which hold their
   * experts and nothing else: less memory on those ranks, one more message per layer. 0 (the
   * default): every rank holds them and runs the whole step. Every rank must load alike. */
  int32_t dense_on_rank0;
} moe_dist_placement;

MOE_API moe_status moe_dist_placement_init(moe_dist_placement* placement, size_t struct_size);

static inline moe_dist_placement moe_dist_default_placement(void) {
  moe_dist_placement p;
  moe_dist_placement_init(&p, sizeof(p));
  return p;
}

/* moe_dist_model_load with a placement (NULL: the default, round robin with the dense weights on
 * every rank). */
MOE_API moe_status moe_dist_model_load_placed(moe_dist* dist, const char* path,
                                              const moe_model_params* params,
                                              const moe_dist_placement* placement,
                                              moe_model** out_model);
/* Rank 0: a context over the world (moe_context_params as for moe_context_create; the routing
 * policies apply on every rank). One context per world at a time. Free it with
 * moe_context_free before moe_dist_free. */
MOE_API moe_status moe_dist_context_create(moe_dist* dist, moe_model* model,
                                           const moe_context_params* params,
                                           moe_context** out_context);
/* Rank 0: a batching engine over the world (moe_engine_params as for moe_engine_create; then
 * moe_engine_submit and the rest as usual). Needs the model loaded with the dense weights on rank
 * 0 only (moe_dist_placement.dense_on_rank0; MOE_ERROR_UNSUPPORTED otherwise): each MoE layer of a
 * step sends its inputs to the other ranks, which run their experts over every request of the
 * step at once. A rank that stops answering ends the step's requests with MOE_FINISH_ERROR, and
 * every later one. One engine or context per world at a time; free it before moe_dist_free. */
MOE_API moe_status moe_dist_engine_create(moe_dist* dist, moe_model* model,
                                          const moe_engine_params* params, moe_engine** out_engine);
/* The other ranks: runs rank 0's steps with n_threads threads (0: one per core) until rank 0
 * calls moe_dist_stop_serving or moe_dist_free (MOE_OK), or an exchange fails (its error).
 * idle_timeout_ms: how long to wait for rank 0's next step before giving up (MOE_ERROR_TIMEOUT);
 * 0: forever. */
MOE_API moe_status moe_dist_serve(moe_dist* dist, moe_model* model, int32_t n_threads,
                                  int32_t idle_timeout_ms);
/* Rank 0: ends every other rank's moe_dist_serve, so that all may load another model (each model
 * loaded is served once, then stopped once). MOE_ERROR_INVALID_ARGUMENT on the other ranks. */
MOE_API moe_status moe_dist_stop_serving(moe_dist* dist);
/* Ends this rank's part in the world (on rank 0, after moe_dist_stop_serving if a model loaded
 * since was not stopped yet). NULL is a no-op. */
MOE_API void moe_dist_free(moe_dist* dist);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_C_H_ */
