// Glue between SWIG and the C ABI, compiled into each language's wrapper (never into libmoe.so).
//
// SWIG wraps these small classes rather than moe_c.h directly because the C ABI's shapes do not
// map onto managed languages: out-pointers for handles, (buf, capacity, &len) buffers, params
// structs with struct_size, and plain C callbacks. Here they become constructors, return values,
// plain option structs and virtual methods that SWIG turns into directors (subclassable in Java,
// C# and Go). Failures throw moe_swig::Error, captured on the failing thread together with
// moe_last_error(); each language's part of moe.i turns it into that language's error.
//
// Nothing here is public API: the hand-written classes in each binding are.
#ifndef MOE_BINDINGS_MOE_SWIG_H_
#define MOE_BINDINGS_MOE_SWIG_H_

#include <moe_c.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace moe_swig {

class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// Not a moe_status: the handle was closed. Each language maps it to its own idiom
// (IllegalStateException, ObjectDisposedException, ErrClosed).
constexpr int kClosedStatus = -1;

// Throws the calling thread's last error for a failed status.
inline void Check(moe_status status) {
  if (status != MOE_OK) throw Error(status, moe_last_error());
}

#ifndef SWIG  // internals: SWIG wraps none of them and need not parse them
namespace detail {

// A C handle that calls on several threads may use while another thread closes it: each call
// holds a reference for its duration, so closing never frees what a running call uses (the last
// reference frees it).
template <typename T>
class SharedHandle {
 public:
  SharedHandle() = default;
  explicit SharedHandle(std::shared_ptr<T> p) : p_(std::move(p)) {}
  void Set(std::shared_ptr<T> p) {
    std::lock_guard<std::mutex> lock(mu_);
    p_ = std::move(p);
  }
  // A reference for one call; throws kClosedStatus once closed.
  std::shared_ptr<T> Hold(const char* what) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!p_) throw Error(kClosedStatus, std::string("the ") + what + " is closed");
    return p_;
  }
  std::shared_ptr<T> Peek() const {
    std::lock_guard<std::mutex> lock(mu_);
    return p_;
  }
  std::shared_ptr<T> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(p_);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<T> p_;
};

// The objects whose calls this thread is inside (a token callback runs within them): closing
// one of them from its own callback must not wait for the call it is part of.
inline thread_local std::vector<const void*> calls_on_this_thread;
class CallScope {
 public:
  explicit CallScope(const void* owner) : owner_(owner) { calls_on_this_thread.push_back(owner); }
  ~CallScope() {
    auto it = std::find(calls_on_this_thread.rbegin(), calls_on_this_thread.rend(), owner_);
    if (it != calls_on_this_thread.rend()) calls_on_this_thread.erase(std::next(it).base());
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  const void* owner_;
};
inline bool InCallOn(const void* owner) {
  return std::find(calls_on_this_thread.begin(), calls_on_this_thread.end(), owner) !=
         calls_on_this_thread.end();
}

}  // namespace detail
#endif  // SWIG

inline std::string VersionString() { return moe_version_string(); }
inline std::string StatusString(int status) {
  return moe_status_string(static_cast<moe_status>(status));
}

// Load progress. Return false to cancel the load. Subclassed in each language (a director); the
// language side must not let its own exceptions escape (they cannot cross C frames).
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual bool OnProgress(float progress) = 0;
};

// Streaming. piece is the UTF-8 text the token completes (possibly empty); token is -1 for a final
// flush. Return false to stop. Same rules as ProgressSink.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual bool OnToken(int32_t token, const std::string& piece) = 0;
};

// One token's routing at one MoE layer, as moe_routing_callback tells it: valid during
// RoutingSink::OnRouting only.
class RoutingEvent {
 public:
  int32_t Position() const { return position_; }
  int32_t Layer() const { return layer_; }
  // Best first, the model's top-k of them; -1 (weight 0) where the token ran fewer.
  std::vector<int32_t> Experts() const { return std::vector<int32_t>(experts_, experts_ + n_); }
  std::vector<float> Weights() const { return std::vector<float>(weights_, weights_ + n_); }
#ifndef SWIG
  RoutingEvent(int32_t position, int32_t layer, const int32_t* experts, const float* weights,
               int32_t n)
      : position_(position), layer_(layer), experts_(experts), weights_(weights), n_(n) {}
#endif

 private:
  int32_t position_, layer_;
  const int32_t* experts_;
  const float* weights_;
  int32_t n_;
};

// The routing trace: each processed token's experts per MoE layer, during the context's calls.
// Same rules as ProgressSink.
class RoutingSink {
 public:
  virtual ~RoutingSink() = default;
  virtual void OnRouting(const RoutingEvent& event) = 0;
};

// Log messages (moe_log_level, text without a trailing newline). Same rules as ProgressSink.
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void OnLog(int level, const std::string& message) = 0;
};

namespace detail {
// Set while this thread runs a log callback: the C library holds its log lock then, so changing
// the callback from inside one would deadlock.
inline thread_local bool in_log_callback = false;

inline void LogThunk(moe_log_level level, const char* message, void* user_data) {
  in_log_callback = true;
  try {
    static_cast<LogSink*>(user_data)->OnLog(static_cast<int>(level), message);
  } catch (...) {  // nothing may unwind through the C library
  }
  in_log_callback = false;
}
}  // namespace detail

// Whether this thread is inside a log callback. The bindings check it before taking their own
// lock around SetLogSink: a handler that waited for that lock while another thread held it and
// waited for the C library's log lock would deadlock.
inline bool InLogCallback() { return detail::in_log_callback; }

// Installs sink for messages at min_level or above (nullptr removes it). The C library runs
// callbacks under its log lock, so once this returns no thread is still inside the previous sink:
// the caller may then free it.
inline void SetLogSink(LogSink* sink, int min_level) {
  if (detail::in_log_callback) {
    throw Error(MOE_ERROR_INVALID_ARGUMENT, "the log callback cannot be changed from inside it");
  }
  moe_set_log_callback(sink != nullptr ? &detail::LogThunk : nullptr,
                       static_cast<moe_log_level>(min_level), sink);
}

// A conversation for moe_chat_apply_template, built one message at a time (SWIG has no portable
// list of pairs).
struct NativeChat {
  void Add(const std::string& role, const std::string& content) {
    roles.push_back(role);
    contents.push_back(content);
  }
  std::vector<std::string> roles, contents;  // hidden from SWIG
};

struct NativeModelInfo {
  int32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, n_expert = 0, n_expert_used = 0;
  int32_t n_vocab = 0, n_ctx_train = 0;
  int64_t n_params_total = 0, n_params_active = 0;
  int32_t bos_token = -1, eos_token = -1, eot_token = -1;
  bool has_tokenizer = false, has_chat_template = false;
};

// Everything moe_generate takes, flattened; defaults come from the C library itself.
struct NativeGenerateOptions {
  NativeGenerateOptions() {
    moe_sampling_params s = moe_sampling_default_params();
    temperature = s.temperature;
    top_k = s.top_k;
    top_p = s.top_p;
    min_p = s.min_p;
    repeat_penalty = s.repeat_penalty;
    frequency_penalty = s.frequency_penalty;
    presence_penalty = s.presence_penalty;
    penalty_last_n = s.penalty_last_n;
    seed = static_cast<int64_t>(s.seed);
    moe_generate_params g = moe_generate_default_params();
    max_tokens = g.max_tokens;
    parse_special = g.parse_special != 0;
  }
  void AddStop(const std::string& text) { stops.push_back(text); }
  void ClearStops() { stops.clear(); }
  void AddLogitBias(int32_t token, float bias) { logit_bias.push_back({token, bias}); }

  int32_t max_tokens;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  float repeat_penalty;
  float frequency_penalty;
  float presence_penalty;
  int32_t penalty_last_n;
  int64_t seed;  // signed so that Java gets a long, not a BigInteger
  bool parse_special;
  std::vector<std::string> stops;          // hidden from SWIG; use AddStop
  std::vector<moe_logit_bias> logit_bias;  // hidden from SWIG; use AddLogitBias

  // The C sampling params; they point into logit_bias, so this object must outlive their use.
  moe_sampling_params Sampling() const {
    moe_sampling_params s = moe_sampling_default_params();
    s.temperature = temperature;
    s.top_k = top_k;
    s.top_p = top_p;
    s.min_p = min_p;
    s.repeat_penalty = repeat_penalty;
    s.frequency_penalty = frequency_penalty;
    s.presence_penalty = presence_penalty;
    s.penalty_last_n = penalty_last_n;
    s.logit_bias = logit_bias.empty() ? nullptr : logit_bias.data();
    s.n_logit_bias = logit_bias.size();
    s.seed = static_cast<uint64_t>(seed);
    return s;
  }
};

struct NativeStats {
  int32_t prompt_tokens = 0, generated_tokens = 0;
  double prompt_seconds = 0, generate_seconds = 0;
  double prompt_tokens_per_second = 0, generate_tokens_per_second = 0;
  double attention_seconds = 0, router_seconds = 0, experts_seconds = 0, head_seconds = 0,
         sampling_seconds = 0;
  double active_params_per_token = 0;
  double active_fraction = 0;
  double mean_router_entropy = 0;
  int64_t weight_bytes_read = 0;
  int32_t finish_reason = 0;
  // The expert cache during the call (moe_stats' expert_* fields; 0 when all are resident).
  int64_t expert_cache_hits = 0, expert_cache_misses = 0, expert_bytes_read = 0;
  double expert_read_seconds = 0, expert_wait_seconds = 0;
  int64_t expert_prefetches = 0, expert_prefetch_hits = 0, expert_prefetch_wasted_bytes = 0;
  int64_t expert_predicted = 0, expert_predicted_right = 0;
  // The routing policies at work (moe_stats' rerouted/dropped/reweighted_choices).
  int64_t rerouted_choices = 0, dropped_choices = 0, reweighted_choices = 0;
  // What a token cost on average (moe_stats' weight_bytes_per_token, multiply_adds_per_token).
  double weight_bytes_per_token = 0, multiply_adds_per_token = 0;
};

// Where one expert lives (moe_expert_placement).
struct NativeExpertPlacement {
  int32_t tier = 0;  // moe_expert_tier
  bool in_memory = false;
  int64_t bytes = 0;
  // A method: strings cross by value (the language typemaps), not as member references.
  std::string WeightTypes() const { return weight_types; }
  std::string weight_types;  // hidden from SWIG
};

// moe_expert_layer_stats flattened, kExpertLayerStatFields per layer in this order, seconds as
// nanoseconds: one int64 array crosses into every language with the typemap the expert counts
// use.
enum {  // anonymous: constants in every language, not an enum type
  kLayerHits,
  kLayerMisses,
  kLayerBytesRead,
  kLayerReadNanos,
  kLayerWaitNanos,
  kLayerPrefetches,
  kLayerPrefetchHits,
  kLayerPrefetchWastedBytes,
  kLayerPredicted,
  kLayerPredictedRight,
  kLayerExpertsInMemory,
  kExpertLayerStatFields
};

// A loaded model. Closing it while other threads call it, or while contexts made from it run,
// frees nothing they use: calls hold the handle while they run, and contexts share the weights
// inside the library.
class NativeModel {
 public:
  // expert_*: the expert cache (moe_model_params); 0 bytes and fraction 0: experts resident.
  // expert_placement "": no placement file; memory_limit_bytes 0: what the system has.
  static NativeModel* Load(const std::string& path, bool use_mmap, ProgressSink* progress,
                           int64_t expert_cache_bytes, double expert_cache_fraction,
                           int32_t expert_eviction, bool expert_direct_io,
                           const std::string& expert_placement, bool expert_prefetch,
                           int64_t memory_limit_bytes, int32_t memory_fit,
                           const std::string& expert_warmup, int32_t device, int32_t gpu_index,
                           int64_t gpu_memory_bytes) {
    moe_model_params params = moe_model_default_params();
    if (gpu_memory_bytes < 0) {
      throw Error(MOE_ERROR_INVALID_ARGUMENT, "the GPU memory budget is negative");
    }
    params.device = device;
    params.gpu_index = gpu_index;
    params.gpu_memory_bytes = static_cast<uint64_t>(gpu_memory_bytes);
    if (memory_limit_bytes < 0) {
      throw Error(MOE_ERROR_INVALID_ARGUMENT, "the memory limit is negative");
    }
    params.expert_placement_path = expert_placement.empty() ? nullptr : expert_placement.c_str();
    params.expert_warmup_path = expert_warmup.empty() ? nullptr : expert_warmup.c_str();
    params.expert_prefetch = expert_prefetch ? 1 : 0;
    params.memory_limit_bytes = static_cast<uint64_t>(memory_limit_bytes);
    params.memory_fit = memory_fit;
    params.use_mmap = use_mmap ? 1 : 0;
    if (expert_cache_bytes < 0) {
      throw Error(MOE_ERROR_INVALID_ARGUMENT, "the expert cache size is negative");
    }
    params.expert_cache_bytes = static_cast<uint64_t>(expert_cache_bytes);
    params.expert_cache_fraction = expert_cache_fraction;
    params.expert_eviction = expert_eviction;
    params.expert_direct_io = expert_direct_io ? 1 : 0;
    if (progress != nullptr) {
      params.progress_callback = &ProgressThunk;
      params.progress_user_data = progress;
    }
    moe_model* raw = nullptr;
    Check(moe_model_load(path.c_str(), &params, &raw));
    return new NativeModel(std::shared_ptr<moe_model>(raw, &moe_model_free));
  }

  void Close() { model_.Take(); }
  bool IsOpen() const { return model_.Peek() != nullptr; }

  NativeModelInfo Info() const {
    moe_model_info c = moe_model_default_info();
    Check(moe_model_get_info(Hold().get(), &c));
    NativeModelInfo i;
    i.n_layer = c.n_layer;
    i.n_embd = c.n_embd;
    i.n_head = c.n_head;
    i.n_head_kv = c.n_head_kv;
    i.n_expert = c.n_expert;
    i.n_expert_used = c.n_expert_used;
    i.n_vocab = c.n_vocab;
    i.n_ctx_train = c.n_ctx_train;
    i.n_params_total = c.n_params_total;
    i.n_params_active = c.n_params_active;
    i.bos_token = c.bos_token;
    i.eos_token = c.eos_token;
    i.eot_token = c.eot_token;
    i.has_tokenizer = c.has_tokenizer != 0;
    i.has_chat_template = c.has_chat_template != 0;
    return i;
  }
  NativeExpertPlacement ExpertPlacement(int32_t layer, int32_t expert) const {
    moe_expert_placement c = moe_default_expert_placement();
    Check(moe_model_get_expert_placement(Hold().get(), layer, expert, &c));
    NativeExpertPlacement p;
    p.tier = c.tier;
    p.in_memory = c.in_memory != 0;
    p.bytes = static_cast<int64_t>(c.bytes);
    p.weight_types = c.weight_types;
    return p;
  }
  void PinExpert(int32_t layer, int32_t expert) {
    Check(moe_model_pin_expert(Hold().get(), layer, expert));
  }
  void UnpinExpert(int32_t layer, int32_t expert) {
    Check(moe_model_unpin_expert(Hold().get(), layer, expert));
  }
  // The experts read into the cache.
  int64_t Warmup(const std::string& profile_path) {
    size_t n = 0;
    Check(moe_model_warmup(Hold().get(), profile_path.c_str(), &n));
    return static_cast<int64_t>(n);
  }

  std::string Architecture() const { return InfoString(kArchitecture); }
  std::string Name() const { return InfoString(kName); }
  // Where the forward passes run: "cpu", "cpu (why no GPU)", "cuda:N NAME (...)".
  std::string Device() const { return InfoString(kDevice); }
  std::string ChatTemplate() const { return moe_model_chat_template(Hold().get()); }

  // template_name "" means the model's own template.
  std::string ApplyChatTemplate(const NativeChat& chat, const std::string& template_name,
                                bool add_generation_prompt) const {
    std::vector<moe_chat_message> messages;
    for (size_t i = 0; i < chat.roles.size(); ++i) {
      messages.push_back({chat.roles[i].c_str(), chat.contents[i].c_str()});
    }
    const char* name = template_name.empty() ? nullptr : template_name.c_str();
    const std::shared_ptr<moe_model> model = Hold();
    size_t len = 0;
    moe_status s = moe_chat_apply_template(model.get(), name, messages.data(), messages.size(),
                                           add_generation_prompt, nullptr, 0, &len);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::string text(len + 1, '\0');
    Check(moe_chat_apply_template(model.get(), name, messages.data(), messages.size(),
                                  add_generation_prompt, text.data(), text.size(), &len));
    text.resize(len);
    return text;
  }

  std::vector<int32_t> Tokenize(const std::string& text, bool add_bos, bool parse_special) const {
    uint32_t flags =
        (add_bos ? MOE_TOKENIZE_ADD_BOS : 0u) | (parse_special ? MOE_TOKENIZE_PARSE_SPECIAL : 0u);
    const std::shared_ptr<moe_model> model = Hold();
    size_t n = 0;
    moe_status s = moe_tokenize(model.get(), text.data(), text.size(), flags, nullptr, 0, &n);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::vector<int32_t> tokens(n);
    if (n > 0) {
      Check(moe_tokenize(model.get(), text.data(), text.size(), flags, tokens.data(), n, &n));
    }
    return tokens;
  }

  std::string Detokenize(const int32_t* tokens, size_t n_tokens) const {
    const std::shared_ptr<moe_model> model = Hold();
    size_t len = 0;
    moe_status s = moe_detokenize(model.get(), tokens, n_tokens, nullptr, 0, &len);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::string text(len + 1, '\0');
    Check(moe_detokenize(model.get(), tokens, n_tokens, text.data(), text.size(), &len));
    text.resize(len);
    return text;
  }

  // For NativeContext and NativeDetokenizer; not wrapped. Throws once closed.
  std::shared_ptr<moe_model> Hold() const { return model_.Hold("model"); }

 private:
  explicit NativeModel(std::shared_ptr<moe_model> model) : model_(std::move(model)) {}

  enum InfoText { kArchitecture, kName, kDevice };
  std::string InfoString(InfoText which) const {
    const std::shared_ptr<moe_model> model = Hold();
    moe_model_info c = moe_model_default_info();
    Check(moe_model_get_info(model.get(), &c));
    const char* s = which == kArchitecture ? c.architecture : which == kName ? c.name : c.device;
    return s != nullptr ? s : "";
  }
  static int ProgressThunk(float progress, void* user_data) {
    try {
      return static_cast<ProgressSink*>(user_data)->OnProgress(progress) ? 1 : 0;
    } catch (...) {  // nothing may unwind through the C library
      return 0;
    }
  }

  detail::SharedHandle<moe_model> model_;
};

// One conversation over a model. One thread at a time, except Cancel(), which is for other
// threads, and Close(), which any thread may call at any time: it cancels a running call and
// waits for it to return (from inside that call's own token callback it cannot wait, and the
// call frees the context as it returns). Calls never start on a closed context.
class NativeContext {
 public:
  // kv_type: a moe_kv_type (0 = F32, 1 = F16).
  NativeContext(const NativeModel& model, int32_t n_ctx, int32_t n_threads, int64_t seed,
                int32_t kv_type, float expert_confidence, int32_t min_experts,
                float router_temperature, int32_t router_noise, float router_noise_scale,
                int64_t router_noise_seed, float expert_capacity_factor, int32_t load_window,
                float load_limit) {
    std::shared_ptr<moe_model> m = model.Hold();
    moe_context_params params = moe_context_default_params();
    params.n_ctx = n_ctx;
    params.n_threads = n_threads;
    params.seed = static_cast<uint64_t>(seed);
    params.kv_type = kv_type;
    params.expert_confidence = expert_confidence;
    params.min_experts = min_experts;
    params.router_temperature = router_temperature;
    params.router_noise = router_noise;
    params.router_noise_scale = router_noise_scale;
    params.router_noise_seed = static_cast<uint64_t>(router_noise_seed);
    params.expert_capacity_factor = expert_capacity_factor;
    params.load_window = load_window;
    params.load_limit = load_limit;
    moe_context* raw = nullptr;
    Check(moe_context_create(m.get(), &params, &raw));
    context_.Set(std::shared_ptr<moe_context>(raw, &moe_context_free));
    model_ = std::move(m);
  }
  ~NativeContext() { Close(); }
  NativeContext(const NativeContext&) = delete;
  NativeContext& operator=(const NativeContext&) = delete;

  void Close() {
    std::shared_ptr<moe_context> ctx = context_.Take();
    if (!ctx) return;
    std::weak_ptr<moe_context> running = ctx;
    moe_context_cancel(ctx.get());
    ctx.reset();  // frees it now unless a call holds it
    if (detail::InCallOn(this)) return;
    // A call that took its reference just before Close may not have reached the library yet, so
    // the first cancel missed it: cancel again until the last reference is gone.
    for (int pause = 50;; pause = std::min(2 * pause, kMaxPauseMicros)) {
      std::shared_ptr<moe_context> held = running.lock();
      if (!held) break;
      moe_context_cancel(held.get());
      held.reset();
      std::this_thread::sleep_for(std::chrono::microseconds(pause));
    }
  }
  bool IsOpen() const { return context_.Peek() != nullptr; }

  // Safe from any thread while another runs Generate; nothing happens once closed.
  void Cancel() {
    if (std::shared_ptr<moe_context> ctx = context_.Peek()) Check(moe_context_cancel(ctx.get()));
  }
  void Reset() { Check(moe_context_reset(Hold().get())); }
  void Truncate(int32_t n_keep) { Check(moe_context_truncate(Hold().get(), n_keep)); }
  int32_t NPast() const { return moe_context_n_past(Hold().get()); }
  int32_t NCtx() const { return moe_context_n_ctx(Hold().get()); }

  // Both return the moe_finish_reason.
  int32_t Generate(const std::string& prompt, const NativeGenerateOptions& options,
                   TokenSink* sink) {
    const std::shared_ptr<moe_context> ctx = Hold();
    Params p(options);
    {
      detail::CallScope scope(this);
      Check(
          moe_generate(ctx.get(), prompt.c_str(), &p.generate, sink ? &TokenThunk : nullptr, sink));
    }
    return StatsOf(ctx.get()).finish_reason;
  }
  int32_t GenerateTokens(const int32_t* tokens, size_t n_tokens,
                         const NativeGenerateOptions& options, TokenSink* sink) {
    const std::shared_ptr<moe_context> ctx = Hold();
    Params p(options);
    {
      detail::CallScope scope(this);
      Check(moe_generate_tokens(ctx.get(), tokens, n_tokens, &p.generate,
                                sink ? &TokenThunk : nullptr, sink));
    }
    return StatsOf(ctx.get()).finish_reason;
  }

  NativeStats Stats() const { return StatsOf(Hold().get()); }

  // Sets (null: removes) the sink told each token's routing during later calls; it must outlive
  // them. Busy while a call runs.
  void SetRoutingSink(RoutingSink* sink) {
    Check(moe_context_set_routing_callback(Hold().get(), sink ? &RoutingThunk : nullptr, sink));
  }

  // Row-major [n_layer x n_expert]; NExpert() gives the row length.
  std::vector<int64_t> ExpertCounts() const {
    const std::shared_ptr<moe_context> ctx = Hold();
    size_t n = 0;
    moe_status s = moe_context_get_expert_counts(ctx.get(), nullptr, 0, &n);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::vector<int64_t> counts(n);
    if (n > 0) Check(moe_context_get_expert_counts(ctx.get(), counts.data(), n, &n));
    return counts;
  }
  // Switches the layer's experts off (an empty set: all back on); moe_context_disable_experts.
  void DisableExperts(int32_t layer, const int32_t* experts, size_t n_experts) {
    Check(moe_context_disable_experts(Hold().get(), layer, experts, n_experts));
  }
  // The last call's statistics in the Prometheus text format (moe_context_metrics_text).
  std::string MetricsText() const {
    const std::shared_ptr<moe_context> ctx = Hold();
    size_t n = 0;
    moe_status s = moe_context_metrics_text(ctx.get(), nullptr, 0, &n);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::string text(n + 1, '\0');
    Check(moe_context_metrics_text(ctx.get(), text.data(), text.size(), &n));
    text.resize(n);
    return text;
  }
  void WriteRoutingProfile(const std::string& path) const {
    Check(moe_context_write_routing_profile(Hold().get(), path.c_str()));
  }

  // The expert cache per layer in the last call, kExpertLayerStatFields values per layer.
  std::vector<int64_t> ExpertLayerStats() const {
    const std::shared_ptr<moe_context> ctx = Hold();
    size_t n = 0;
    moe_status s = moe_context_get_expert_layer_stats(ctx.get(), nullptr, 0, &n);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::vector<moe_expert_layer_stats> layers(n);
    if (n > 0) Check(moe_context_get_expert_layer_stats(ctx.get(), layers.data(), n, &n));
    std::vector<int64_t> flat(n * kExpertLayerStatFields);
    for (size_t i = 0; i < n; ++i) {
      const moe_expert_layer_stats& l = layers[i];
      int64_t* row = flat.data() + i * kExpertLayerStatFields;
      row[kLayerHits] = l.hits;
      row[kLayerMisses] = l.misses;
      row[kLayerBytesRead] = l.bytes_read;
      row[kLayerReadNanos] = static_cast<int64_t>(l.read_seconds * 1e9);
      row[kLayerWaitNanos] = static_cast<int64_t>(l.wait_seconds * 1e9);
      row[kLayerPrefetches] = l.prefetches;
      row[kLayerPrefetchHits] = l.prefetch_hits;
      row[kLayerPrefetchWastedBytes] = l.prefetch_wasted_bytes;
      row[kLayerPredicted] = l.predicted;
      row[kLayerPredictedRight] = l.predicted_right;
      row[kLayerExpertsInMemory] = l.experts_in_memory;
    }
    return flat;
  }
  int32_t NExpert() const {
    Hold();
    moe_model_info info = moe_model_default_info();
    Check(moe_model_get_info(model_.get(), &info));
    return info.n_expert;
  }

  // The low-level path: append tokens, read the last token's logits, sample.
  void Decode(const int32_t* tokens, size_t n_tokens) {
    Check(moe_decode(Hold().get(), tokens, n_tokens));
  }
  std::vector<float> Logits() {
    const std::shared_ptr<moe_context> ctx = Hold();
    const float* logits = nullptr;
    int32_t n_vocab = 0;
    Check(moe_get_logits(ctx.get(), &logits, &n_vocab));
    return std::vector<float>(logits, logits + n_vocab);
  }
  int32_t Sample(const NativeGenerateOptions& options) {
    moe_sampling_params p = options.Sampling();
    int32_t token = -1;
    Check(moe_sample(Hold().get(), &p, &token));
    return token;
  }

 private:
  static constexpr int kMaxPauseMicros = 2000;

  // The C params structs point into this, so it lives for the whole call.
  struct Params {
    explicit Params(const NativeGenerateOptions& o) {
      sampling = o.Sampling();
      for (const std::string& s : o.stops) stops.push_back(s.c_str());
      generate = moe_generate_default_params();
      generate.sampling = &sampling;
      generate.max_tokens = o.max_tokens;
      generate.stop = stops.empty() ? nullptr : stops.data();
      generate.n_stop = stops.size();
      generate.parse_special = o.parse_special ? 1 : 0;
    }
    moe_sampling_params sampling;
    moe_generate_params generate;
    std::vector<const char*> stops;
  };

  std::shared_ptr<moe_context> Hold() const { return context_.Hold("context"); }

  static NativeStats StatsOf(const moe_context* ctx) {
    moe_stats c = moe_default_stats();
    Check(moe_context_get_stats(ctx, &c));
    NativeStats s;
    s.prompt_tokens = c.prompt_tokens;
    s.generated_tokens = c.generated_tokens;
    s.prompt_seconds = c.prompt_seconds;
    s.generate_seconds = c.generate_seconds;
    s.prompt_tokens_per_second = c.prompt_tokens_per_second;
    s.generate_tokens_per_second = c.generate_tokens_per_second;
    s.attention_seconds = c.attention_seconds;
    s.router_seconds = c.router_seconds;
    s.experts_seconds = c.experts_seconds;
    s.head_seconds = c.head_seconds;
    s.sampling_seconds = c.sampling_seconds;
    s.active_params_per_token = c.active_params_per_token;
    s.active_fraction = c.active_fraction;
    s.mean_router_entropy = c.mean_router_entropy;
    s.weight_bytes_read = c.weight_bytes_read;
    s.finish_reason = c.finish_reason;
    s.expert_cache_hits = c.expert_cache_hits;
    s.expert_cache_misses = c.expert_cache_misses;
    s.expert_bytes_read = c.expert_bytes_read;
    s.expert_read_seconds = c.expert_read_seconds;
    s.expert_wait_seconds = c.expert_wait_seconds;
    s.expert_prefetches = c.expert_prefetches;
    s.expert_prefetch_hits = c.expert_prefetch_hits;
    s.expert_prefetch_wasted_bytes = c.expert_prefetch_wasted_bytes;
    s.expert_predicted = c.expert_predicted;
    s.expert_predicted_right = c.expert_predicted_right;
    s.rerouted_choices = c.rerouted_choices;
    s.dropped_choices = c.dropped_choices;
    s.reweighted_choices = c.reweighted_choices;
    s.weight_bytes_per_token = c.weight_bytes_per_token;
    s.multiply_adds_per_token = c.multiply_adds_per_token;
    return s;
  }
  static void RoutingThunk(int32_t position, int32_t layer, const int32_t* experts,
                           const float* weights, int32_t n, void* user_data) {
    try {
      static_cast<RoutingSink*>(user_data)->OnRouting(
          RoutingEvent(position, layer, experts, weights, n));
    } catch (...) {  // nothing may unwind through the C library
    }
  }
  static int TokenThunk(int32_t token, const char* piece, size_t len, void* user_data) {
    try {
      return static_cast<TokenSink*>(user_data)->OnToken(token, std::string(piece, len)) ? 1 : 0;
    } catch (...) {  // nothing may unwind through the C library
      return 0;
    }
  }

  detail::SharedHandle<moe_context> context_;
  std::shared_ptr<moe_model> model_;  // for NExpert; the library keeps the weights itself
};

// Streaming detokenizer: text completed by each pushed token. Close() may come from any thread:
// a Push running then finishes on the handle it holds.
class NativeDetokenizer {
 public:
  explicit NativeDetokenizer(const NativeModel& model) {
    std::shared_ptr<moe_model> m = model.Hold();
    moe_detokenizer* raw = nullptr;
    Check(moe_detokenizer_create(m.get(), &raw));
    detokenizer_.Set(std::shared_ptr<moe_detokenizer>(raw, &moe_detokenizer_free));
  }
  ~NativeDetokenizer() = default;
  NativeDetokenizer(const NativeDetokenizer&) = delete;
  NativeDetokenizer& operator=(const NativeDetokenizer&) = delete;

  void Close() { detokenizer_.Take(); }
  bool IsOpen() const { return detokenizer_.Peek() != nullptr; }

  std::string Push(int32_t token) {
    const std::shared_ptr<moe_detokenizer> d = detokenizer_.Hold("detokenizer");
    // Most tokens complete a few bytes; a too-small buffer leaves the token unconsumed, so retry.
    char small[64];
    size_t len = 0;
    moe_status s = moe_detokenizer_push(d.get(), token, small, sizeof(small), &len);
    if (s == MOE_OK) return std::string(small, len);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::string text(len + 1, '\0');
    Check(moe_detokenizer_push(d.get(), token, text.data(), text.size(), &len));
    text.resize(len);
    return text;
  }

 private:
  detail::SharedHandle<moe_detokenizer> detokenizer_;
};

// The batching engine's results and statistics, flattened.
struct NativeRequestResult {
  bool ready = false;  // TryWait: false while the request runs (nothing else is set then)
  int32_t finish_reason = 0;
  int32_t status = 0;  // moe_status
  int32_t prompt_tokens = 0, prefix_tokens_reused = 0, generated_tokens = 0, preemptions = 0;
  double queue_seconds = 0, first_token_seconds = 0, total_seconds = 0;
  double decode_tokens_per_second = 0;
  // What its tokens cost (moe_request_stats' weight_bytes ... decode_multiply_adds_per_token).
  int64_t weight_bytes = 0, multiply_adds = 0;
  double decode_weight_bytes_per_token = 0, decode_multiply_adds_per_token = 0;
  std::string Text() const { return text; }
  std::string Message() const { return message; }
  std::vector<int32_t> Tokens() const { return tokens; }
  std::string text, message;    // hidden from SWIG
  std::vector<int32_t> tokens;  // hidden from SWIG
};

struct NativeEngineStats {
  int64_t submitted = 0, finished = 0, running = 0, waiting = 0, steps = 0, tokens = 0;
  int64_t decode_tokens = 0, prefix_tokens_reused = 0, preemptions = 0;
  int32_t kv_blocks = 0, kv_blocks_in_use = 0, kv_blocks_cached = 0, kv_block_size = 0;
  double step_seconds = 0, mean_sequences_per_step = 0, mean_tokens_per_step = 0;
  double mean_experts_per_step = 0;
  int64_t rerouted_choices = 0, dropped_choices = 0, reweighted_choices = 0;
  int32_t kv_window_blocks = 0, kv_window_blocks_in_use = 0, kv_window_blocks_cached = 0;
  int64_t kv_bytes = 0;
  int32_t kv_state_slots = 0, kv_state_slots_in_use = 0, kv_state_slots_cached = 0;
};

// Everything moe_engine_create takes; defaults from the C library itself.
struct NativeEngineOptions {
  NativeEngineOptions() {
    moe_engine_params p = moe_engine_default_params();
    threads = p.n_threads;
    kv_type = p.kv_type;
    kv_block_size = p.kv_block_size;
    n_ctx = p.n_ctx;
    kv_tokens = p.kv_tokens;
    kv_bytes = p.kv_bytes;
    max_sequences = p.max_sequences;
    max_step_tokens = p.max_step_tokens;
    prefix_sharing = p.prefix_sharing != 0;
    when_kv_full = p.when_kv_full;
    own_thread = p.own_thread != 0;
    seed = static_cast<int64_t>(p.seed);
    expert_confidence = p.expert_confidence;
    min_experts = p.min_experts;
    router_temperature = p.router_temperature;
    router_noise = p.router_noise;
    router_noise_scale = p.router_noise_scale;
    router_noise_seed = static_cast<int64_t>(p.router_noise_seed);
    expert_capacity_factor = p.expert_capacity_factor;
    load_window = p.load_window;
    load_limit = p.load_limit;
  }
  int32_t threads, kv_type, kv_block_size, n_ctx;
  int64_t kv_tokens, kv_bytes;
  int32_t max_sequences, max_step_tokens;
  bool prefix_sharing;
  int32_t when_kv_full;  // moe_kv_full_policy
  bool own_thread;
  int64_t seed;
  float expert_confidence;
  int32_t min_experts;
  float router_temperature;
  int32_t router_noise;  // moe_router_noise
  float router_noise_scale;
  int64_t router_noise_seed;
  float expert_capacity_factor;
  int32_t load_window;
  float load_limit;
};

// One engine request's events, on the thread that steps the engine: each token, then exactly one
// OnFinish with the whole result (valid during the call only: copy what you keep). The language
// side keeps the sink alive until OnFinish and must not let exceptions escape.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // Return false to end this request.
  virtual bool OnToken(int64_t request, int32_t token, const std::string& piece) = 0;
  virtual void OnFinish(int64_t request, const NativeRequestResult& result) = 0;
};

#ifndef SWIG
namespace detail {
inline NativeRequestResult ResultOf(const moe_request_result* r) {
  NativeRequestResult out;
  out.ready = true;
  moe_request_stats st = moe_default_request_stats();
  Check(moe_request_result_get_stats(r, &st));
  out.finish_reason = st.finish_reason;
  out.status = st.status;
  out.prompt_tokens = st.prompt_tokens;
  out.prefix_tokens_reused = st.prefix_tokens_reused;
  out.generated_tokens = st.generated_tokens;
  out.preemptions = st.preemptions;
  out.queue_seconds = st.queue_seconds;
  out.first_token_seconds = st.first_token_seconds;
  out.total_seconds = st.total_seconds;
  out.decode_tokens_per_second = st.decode_tokens_per_second;
  out.weight_bytes = st.weight_bytes;
  out.multiply_adds = st.multiply_adds;
  out.decode_weight_bytes_per_token = st.decode_weight_bytes_per_token;
  out.decode_multiply_adds_per_token = st.decode_multiply_adds_per_token;
  out.text = moe_request_result_text(r);
  out.message = moe_request_result_message(r);
  size_t n = 0;
  const int32_t* tokens = moe_request_result_tokens(r, &n);
  out.tokens.assign(tokens, tokens + n);
  return out;
}
}  // namespace detail
#endif  // SWIG

// The batching engine. Any thread may Submit, Cancel, Wait and read Stats at any time; sinks run
// on the engine's thread (or in Step). Close() from any thread finishes what is left as
// cancelled (each sink gets its OnFinish) and wakes waiters (they throw: closed); from inside a
// sink it happens right after that sink returns, on another thread.
class NativeEngine {
 public:
  NativeEngine(const NativeModel& model, const NativeEngineOptions& o) {
    std::shared_ptr<moe_model> m = model.Hold();
    moe_engine_params p = moe_engine_default_params();
    p.n_threads = o.threads;
    p.kv_type = o.kv_type;
    p.kv_block_size = o.kv_block_size;
    p.n_ctx = o.n_ctx;
    p.kv_tokens = o.kv_tokens;
    p.kv_bytes = o.kv_bytes;
    p.max_sequences = o.max_sequences;
    p.max_step_tokens = o.max_step_tokens;
    p.prefix_sharing = o.prefix_sharing ? 1 : 0;
    p.when_kv_full = o.when_kv_full;
    p.own_thread = o.own_thread ? 1 : 0;
    p.seed = static_cast<uint64_t>(o.seed);
    p.expert_confidence = o.expert_confidence;
    p.min_experts = o.min_experts;
    p.router_temperature = o.router_temperature;
    p.router_noise = o.router_noise;
    p.router_noise_scale = o.router_noise_scale;
    p.router_noise_seed = static_cast<uint64_t>(o.router_noise_seed);
    p.expert_capacity_factor = o.expert_capacity_factor;
    p.load_window = o.load_window;
    p.load_limit = o.load_limit;
    moe_engine* raw = nullptr;
    Check(moe_engine_create(m.get(), &p, &raw));
    engine_.Set(std::shared_ptr<moe_engine>(raw, &moe_engine_free));
  }
  ~NativeEngine() { Close(); }
  NativeEngine(const NativeEngine&) = delete;
  NativeEngine& operator=(const NativeEngine&) = delete;

  void Close() {
    std::shared_ptr<moe_engine> e = engine_.Take();
    if (!e) return;
    if (detail::InCallOn(this)) {
      // A sink's thread is stepping the engine: it cannot wait for itself.
      std::thread([e = std::move(e)]() mutable { e.reset(); }).detach();
      return;
    }
    e.reset();  // waiters hold it for one slice at most
  }
  bool IsOpen() const { return engine_.Peek() != nullptr; }

  // The request's id; sink may be null.
  int64_t Submit(const std::string& prompt, const NativeGenerateOptions& options,
                 RequestSink* sink) {
    return SubmitRequest(&prompt, nullptr, 0, options, sink);
  }
  // The prompt as token ids, used as given (no BOS added).
  int64_t SubmitTokens(const int32_t* tokens, size_t n_tokens, const NativeGenerateOptions& options,
                       RequestSink* sink) {
    if (n_tokens == 0) throw Error(MOE_ERROR_INVALID_ARGUMENT, "an empty token prompt");
    return SubmitRequest(nullptr, tokens, n_tokens, options, sink);
  }
  void Cancel(int64_t request) {
    Check(moe_engine_cancel(engine_.Hold("engine").get(), static_cast<moe_request_id>(request)));
  }
  // For requests submitted without a sink. timeout_seconds < 0: no limit.
  NativeRequestResult Wait(int64_t request, double timeout_seconds) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      // A slice at a time, so Close never waits on a waiter for long.
      double slice = 0.05;
      if (timeout_seconds >= 0) {
        const double left =
            timeout_seconds -
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        slice = std::max(0.0, std::min(slice, left));
      }
      moe_request_result* r = nullptr;
      const moe_status s = moe_engine_wait(engine_.Hold("engine").get(),
                                           static_cast<moe_request_id>(request), slice, &r);
      if (s == MOE_ERROR_TIMEOUT && !(timeout_seconds >= 0 && slice <= 0)) continue;
      Check(s);
      std::unique_ptr<moe_request_result, void (*)(moe_request_result*)> owned(
          r, &moe_request_result_free);
      return detail::ResultOf(r);
    }
  }
  NativeRequestResult TryWait(int64_t request) {
    moe_request_result* r = nullptr;
    const moe_status s =
        moe_engine_try_wait(engine_.Hold("engine").get(), static_cast<moe_request_id>(request), &r);
    if (s == MOE_ERROR_NOT_READY) return NativeRequestResult();
    Check(s);
    std::unique_ptr<moe_request_result, void (*)(moe_request_result*)> owned(
        r, &moe_request_result_free);
    return detail::ResultOf(r);
  }
  // Engines made with own_thread false: one step here; false when there was nothing to do.
  bool Step() {
    const std::shared_ptr<moe_engine> e = engine_.Hold("engine");
    int32_t worked = 0;
    detail::CallScope scope(this);
    Check(moe_engine_step(e.get(), &worked));
    return worked != 0;
  }
  // Switches the layer's experts off for every request (an empty set: all back on);
  // moe_engine_disable_experts.
  void DisableExperts(int32_t layer, const int32_t* experts, size_t n_experts) {
    const std::shared_ptr<moe_engine> e = engine_.Hold("engine");
    Check(moe_engine_disable_experts(e.get(), layer, experts, n_experts));
  }
  // The engine's statistics in the Prometheus text format (moe_engine_metrics_text).
  std::string MetricsText() const {
    const std::shared_ptr<moe_engine> e = engine_.Hold("engine");
    size_t n = 0;
    moe_status s = moe_engine_metrics_text(e.get(), nullptr, 0, &n);
    if (s != MOE_ERROR_BUFFER_TOO_SMALL) Check(s);
    std::string text(n + 1, '\0');
    Check(moe_engine_metrics_text(e.get(), text.data(), text.size(), &n));
    text.resize(n);
    return text;
  }
  NativeEngineStats Stats() const {
    moe_engine_stats c = moe_default_engine_stats();
    Check(moe_engine_get_stats(engine_.Hold("engine").get(), &c));
    NativeEngineStats s;
    s.submitted = c.submitted;
    s.finished = c.finished;
    s.running = c.running;
    s.waiting = c.waiting;
    s.steps = c.steps;
    s.tokens = c.tokens;
    s.decode_tokens = c.decode_tokens;
    s.prefix_tokens_reused = c.prefix_tokens_reused;
    s.preemptions = c.preemptions;
    s.kv_blocks = c.kv_blocks;
    s.kv_blocks_in_use = c.kv_blocks_in_use;
    s.kv_blocks_cached = c.kv_blocks_cached;
    s.kv_block_size = c.kv_block_size;
    s.step_seconds = c.step_seconds;
    s.mean_sequences_per_step = c.mean_sequences_per_step;
    s.mean_tokens_per_step = c.mean_tokens_per_step;
    s.mean_experts_per_step = c.mean_experts_per_step;
    s.rerouted_choices = c.rerouted_choices;
    s.dropped_choices = c.dropped_choices;
    s.reweighted_choices = c.reweighted_choices;
    s.kv_window_blocks = c.kv_window_blocks;
    s.kv_window_blocks_in_use = c.kv_window_blocks_in_use;
    s.kv_window_blocks_cached = c.kv_window_blocks_cached;
    s.kv_bytes = c.kv_bytes;
    s.kv_state_slots = c.kv_state_slots;
    s.kv_state_slots_in_use = c.kv_state_slots_in_use;
    s.kv_state_slots_cached = c.kv_state_slots_cached;
    return s;
  }

 private:
  struct Call {
    RequestSink* sink;
    const NativeEngine* owner;
  };
  int64_t SubmitRequest(const std::string* prompt, const int32_t* tokens, size_t n_tokens,
                        const NativeGenerateOptions& options, RequestSink* sink) {
    const std::shared_ptr<moe_engine> e = engine_.Hold("engine");
    moe_sampling_params sampling = options.Sampling();
    std::vector<const char*> stops;
    for (const std::string& s : options.stops) stops.push_back(s.c_str());
    moe_generate_params g = moe_generate_default_params();
    g.sampling = &sampling;
    g.max_tokens = options.max_tokens;
    g.stop = stops.empty() ? nullptr : stops.data();
    g.n_stop = stops.size();
    g.parse_special = options.parse_special ? 1 : 0;
    moe_request_params r = moe_request_default_params();
    r.prompt = prompt != nullptr ? prompt->c_str() : nullptr;
    r.tokens = tokens;
    r.n_tokens = n_tokens;
    r.generate = &g;
    r.keep_result = sink == nullptr ? 1 : 0;  // with a sink, OnFinish has the result
    auto* call = sink != nullptr ? new Call{sink, this} : nullptr;
    moe_request_id id = 0;
    const moe_status s = moe_engine_submit(e.get(), &r, call ? &EventThunk : nullptr, call, &id);
    if (s != MOE_OK) {
      delete call;
      Check(s);
    }
    return static_cast<int64_t>(id);
  }
  static int EventThunk(const moe_request_event* ev, void* user_data) {
    auto* call = static_cast<Call*>(user_data);
    int go_on = 1;
    try {
      detail::CallScope scope(call->owner);
      const int64_t id = static_cast<int64_t>(ev->request);
      if (ev->finish_reason == MOE_FINISH_NONE) {
        go_on = call->sink->OnToken(id, ev->token, std::string(ev->piece, ev->piece_len)) ? 1 : 0;
      } else {
        NativeRequestResult result = detail::ResultOf(ev->result);
        call->sink->OnFinish(id, result);
      }
    } catch (...) {  // nothing may unwind through the C library
      go_on = 0;
    }
    if (ev->finish_reason != MOE_FINISH_NONE) delete call;  // the last event
    return go_on;
  }

  detail::SharedHandle<moe_engine> engine_;
};

// Copies a vector into a caller array in one call (C# and Go read token lists this way).
inline void CopyInts(const std::vector<int32_t>& from, int32_t* to, size_t n) {
  for (size_t i = 0; i < n && i < from.size(); ++i) to[i] = from[i];
}

}  // namespace moe_swig

#endif  // MOE_BINDINGS_MOE_SWIG_H_
