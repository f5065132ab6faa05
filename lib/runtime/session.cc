#include "lib/runtime/session.h"

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/kv_cache_for.h"
#include "lib/runtime/expert_mask.h"
#include "lib/runtime/stop_matcher.h"
#include "lib/tokenizer/stream_decoder.h"

namespace moe {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Records in *stats what the engine's expert cache does from construction to destruction, in
// all and per layer.
class ExpertCacheDelta {
 public:
  ExpertCacheDelta(const Engine& engine, SessionStats* stats)
      : store_(engine.expert_store()), stats_(stats) {
    if (store_ != nullptr) before_ = store_->cache().layer_stats();
  }
  ~ExpertCacheDelta() {
    if (store_ == nullptr) return;
    std::vector<ExpertCacheStats> layers = store_->cache().layer_stats();
    stats_->expert_cache = ExpertCacheStats();
    for (size_t l = 0; l < layers.size(); ++l) {
      if (l < before_.size()) layers[l] -= before_[l];
      stats_->expert_cache += layers[l];
    }
    stats_->expert_cache_layers = std::move(layers);
  }

 private:
  const ExpertStore* store_;
  SessionStats* stats_;
  std::vector<ExpertCacheStats> before_;
};

}  // namespace

class Session::Busy {
 public:
  explicit Busy(Session& s) : s_(s) {
    uint32_t idle = 0;
    acquired_ = s_.state_.compare_exchange_strong(idle, kInCall);
    if (acquired_) s_.running_thread_.store(std::this_thread::get_id());
  }
  ~Busy() {
    if (!acquired_) return;
    s_.running_thread_.store(std::thread::id());
    s_.state_.store(0);  // also drops a cancellation that came too late to stop this call
    s_.state_.notify_all();
  }
  absl::Status status() const {
    return acquired_ ? absl::OkStatus()
                     : absl::AbortedError(
                           "context is busy: another call is running on it (a context is for "
                           "one thread at a time)");
  }

 private:
  Session& s_;
  bool acquired_;
};

void Session::Cancel() {
  uint32_t s = state_.load();
  while ((s & kInCall) && !(s & kCancelRequested)) {
    if (state_.compare_exchange_weak(s, s | kCancelRequested)) return;
  }
}

void Session::CancelAndWait() {
  for (uint32_t s = state_.load(); s & kInCall; s = state_.load()) {
    if (!(s & kCancelRequested)) {
      Cancel();
      continue;
    }
    state_.wait(s);  // until the call ends (state_ changes to 0, or to a new call's state)
  }
}

bool Session::RunningOnThisThread() const {
  return (state_.load() & kInCall) && running_thread_.load() == std::this_thread::get_id();
}

absl::Status Session::Inspect(const std::function<void()>& f) {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  f();
  return absl::OkStatus();
}

absl::StatusOr<KvCache> CreateSessionCache(const Model& model, const SessionOptions& options,
                                           MemorySpace& memory) {
  const HParams& h = model.hp();
  int64_t n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min<int64_t>(h.n_ctx_train, 4096);
  if (n_ctx <= 0) n_ctx = 4096;
  if (options.n_batch <= 0) return absl::InvalidArgumentError("n_batch must be positive");
  // Prompts go through in steps of n_batch tokens, so sliding-window layers keep only their
  // window and one step.
  absl::StatusOr<KvCache> cache =
      KvCacheFor(model, n_ctx, options.kv_type, options.n_batch, memory);
  if (absl::IsResourceExhausted(cache.status())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the KV cache of a ", n_ctx, "-position context: ", cache.status().message(),
                     " (ask for a shorter context, n_ctx, or a smaller KV type: f16, q8_0)"));
  }
  return cache;
}

absl::StatusOr<std::unique_ptr<Session>> Session::Create(std::shared_ptr<const Engine> engine,
                                                         const SessionOptions& options) {
  if (!engine) return absl::InvalidArgumentError("no model");
  if (!engine->model()->spec().holds_dense()) {
    return absl::FailedPreconditionError(
        "this model holds only its rank's routed experts (the dense weights are on rank 0): it "
        "serves (ServeExpertParallel, moe_dist_serve); rank 0 drives");
  }
  MOE_RETURN_IF_ERROR(CheckRoutingPolicy(options.routing));
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, engine->CreateBackend(options.threads));
  MOE_ASSIGN_OR_RETURN(KvCache cache, CreateSessionCache(*engine->model(), options, *backend));
  Communicator* comm = options.communicator;
  if (const ExpertRanks* ranks = engine->expert_ranks(); ranks != nullptr) {
    if (comm == nullptr || comm->size() != ranks->world() || comm->rank() != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("this model holds its share of the experts of a world of ", ranks->world(),
                       " ranks: a session runs on rank 0 of that world (the others serve)"));
    }
  } else if (comm != nullptr && comm->size() > 1) {
    return absl::FailedPreconditionError(
        "a world of ranks needs the model loaded for expert parallelism (expert_world)");
  }
  const int64_t n_ctx = cache.n_ctx();
  auto session = std::unique_ptr<Session>(
      new Session(std::move(engine), std::move(backend), std::move(cache), options));
  if (session->engine_->expert_ranks() == nullptr) {
    // A cancellation also stops a step between layers (a long prompt chunk, a slow expert read).
    // Not over ranks: the serving ranks run every step whole.
    Session* s = session.get();
    session->transformer_.set_cancel_check([s] { return s->cancel_requested(); });
  } else {
    session->driver_ = std::make_unique<StepDriver>(comm, *session->engine_->model(),
                                                    *session->engine_->expert_ranks());
    MOE_RETURN_IF_ERROR(session->driver_->Open(options, n_ctx));
    session->transformer_.set_expert_parallel(comm, session->engine_->expert_ranks());
  }
  return session;
}

Session::Session(std::shared_ptr<const Engine> engine, std::unique_ptr<Backend> backend,
                 KvCache cache, const SessionOptions& options)
    : engine_(std::move(engine)),
      options_(options),
      backend_(std::move(backend)),
      transformer_(engine_->model(), backend_.get()),
      cache_(std::move(cache)) {
  engine_->PrepareTransformer(&transformer_, options.routing);
}

Session::~Session() {
  // The serving ranks drop their mirror; a world already broken has nothing to tell.
  if (driver_) driver_->Close().IgnoreError();
}

absl::Status Session::Decode(absl::Span<const int32_t> tokens, std::vector<float>* all_logits) {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  stats_ = SessionStats();
  ExpertCacheDelta expert_cache(*engine_, &stats_);
  auto start = std::chrono::steady_clock::now();
  absl::Status s = DecodeLocked(tokens, all_logits);
  stats_.prompt_s = Seconds(start);
  return s;
}

absl::Status Session::DecodeLocked(absl::Span<const int32_t> tokens,
                                   std::vector<float>* all_logits) {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to decode");
  MOE_RETURN_IF_ERROR(RecomputeIfStale());
  if (cache_.size() + static_cast<int64_t>(tokens.size()) > cache_.n_ctx()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("context full: ", cache_.size(), " tokens in the context plus ", tokens.size(),
                     " new ones exceed its length of ", cache_.n_ctx()));
  }
  for (size_t i = 0; i < tokens.size(); i += options_.n_batch) {
    if (cancel_requested()) return absl::CancelledError("cancelled");
    auto chunk = tokens.subspan(i, options_.n_batch);
    MOE_RETURN_IF_ERROR(Forward(chunk, all_logits ? LogitsFor::kAll : LogitsFor::kLast));
    if (all_logits) {
      all_logits->insert(all_logits->end(), logits_.begin(), logits_.end());
      logits_.erase(logits_.begin(), logits_.end() - engine_->model()->hp().n_vocab);
    }
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    n_past_.store(cache_.size(), std::memory_order_relaxed);
    stats_.prompt_tokens += chunk.size();
  }
  // The end of a prompt is where a chat goes back to: a recurrent state is kept there. Not over
  // ranks, whose serving ranks carry states of their own.
  if (tokens.size() > 1 && driver_ == nullptr) cache_.SaveCheckpoint(*backend_, logits_);
  return absl::OkStatus();
}

absl::Status Session::RecomputeIfStale() {
  if (!state_stale_) return absl::OkStatus();
  std::vector<int32_t> kept = std::move(history_);
  history_.clear();
  cache_.set_size(0);
  n_past_.store(0, std::memory_order_relaxed);
  logits_.clear();
  state_stale_ = false;
  // From the latest checkpoint within the history, if one is kept.
  const int64_t from =
      cache_.RestoreCheckpoint(*backend_, static_cast<int64_t>(kept.size()), &logits_);
  history_.assign(kept.begin(), kept.begin() + from);
  n_past_.store(from, std::memory_order_relaxed);
  if (from == static_cast<int64_t>(kept.size())) return absl::OkStatus();
  absl::Status s = DecodeLocked(absl::MakeConstSpan(kept).subspan(from), nullptr);
  if (!s.ok()) {
    // Still stale: the positions computed so far are dropped, the tokens kept.
    history_ = std::move(kept);
    cache_.set_size(0);
    n_past_.store(0, std::memory_order_relaxed);
    state_stale_ = true;
  }
  return s;
}

absl::Status Session::Forward(absl::Span<const int32_t> tokens, LogitsFor which) {
  if (driver_ == nullptr) {
    absl::Status s =
        transformer_.Forward(tokens, cache_, which, &logits_, &stats_.forward, routing_history());
    if (!s.ok() && cache_.recurrent()) state_stale_ = true;
    return s;
  }
  // A token the forward pass would refuse is refused before the serving ranks hear of it.
  MOE_RETURN_IF_ERROR(CheckTokenIds(tokens, engine_->model()->hp().n_vocab));
  MOE_RETURN_IF_ERROR(driver_->Step(cache_.size(), tokens, disabled_experts_));
  absl::Status s =
      transformer_.Forward(tokens, cache_, which, &logits_, &stats_.forward, routing_history());
  if (!s.ok()) driver_->Break(s);
  if (!s.ok() && cache_.recurrent()) state_stale_ = true;
  return s;
}

absl::StatusOr<int32_t> Session::Sample(const SamplerConfig& config) {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  if (logits_.empty()) return absl::FailedPreconditionError("no logits yet: decode tokens first");
  std::vector<float> l = logits_;
  SamplerConfig c = config;
  c.seed = config.seed + rng_calls_++;  // a fresh stream per call, reproducible from the seed
  Sampler sampler(c);
  return sampler.Sample(absl::MakeSpan(l), history_);
}

absl::Status Session::Generate(absl::string_view prompt, const GenerateOptions& options,
                               const TokenCallback& callback) {
  MOE_ASSIGN_OR_RETURN(const Tokenizer* tok, engine_->RequireTokenizer());
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  stats_ = SessionStats();
  ExpertCacheDelta expert_cache(*engine_, &stats_);
  EncodeOptions eo;
  eo.add_bos = cache_.size() == 0 && tok->data().add_bos;
  eo.parse_special = options.parse_special;
  std::vector<int32_t> ids = tok->Encode(prompt, eo);
  return GenerateLocked(ids, options, callback);
}

absl::Status Session::GenerateFromTokens(absl::Span<const int32_t> prompt,
                                         const GenerateOptions& options,
                                         const TokenCallback& callback) {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  stats_ = SessionStats();
  ExpertCacheDelta expert_cache(*engine_, &stats_);
  return GenerateLocked(prompt, options, callback);
}

absl::Status Session::GenerateLocked(absl::Span<const int32_t> prompt,
                                     const GenerateOptions& options,
                                     const TokenCallback& callback) {
  MOE_ASSIGN_OR_RETURN(const Tokenizer* tok, engine_->RequireTokenizer());
  if (prompt.empty() && cache_.size() == 0) {
    return absl::InvalidArgumentError(
        "empty prompt on an empty context: there is nothing to continue from");
  }
  // After a truncation the last kept token's logits are gone: compute them again from it.
  int32_t redo_last = -1;
  if (prompt.empty() && logits_.empty()) {
    // A recurrent state holds the last token already: the rest is computed again first.
    if (!cache_.RingsHoldWindowAt(cache_.size() - 1)) state_stale_ = true;
    redo_last = history_.back();
    history_.pop_back();
    cache_.set_size(cache_.size() - 1);
    n_past_.store(cache_.size(), std::memory_order_relaxed);
    prompt = {&redo_last, 1};
  }
  if (cache_.size() + static_cast<int64_t>(prompt.size()) >= cache_.n_ctx()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt too long: ", prompt.size(), " tokens with ", cache_.size(),
        " already in the context leave no room to generate in a context of ", cache_.n_ctx()));
  }
  auto start = std::chrono::steady_clock::now();
  if (!prompt.empty()) MOE_RETURN_IF_ERROR(DecodeLocked(prompt, nullptr));
  stats_.prompt_s = Seconds(start);

  start = std::chrono::steady_clock::now();
  SamplerConfig sc = options.sampling;
  sc.seed = options.sampling.seed + rng_calls_++;
  Sampler sampler(sc);
  // The continuation follows the prompt, so the SentencePiece leading space is real text here.
  StreamDecoder decoder(*tok, DecodeOptions{/*render_special=*/false}, /*at_text_start=*/false);
  StopMatcher stops(options.stop);
  std::vector<float> scratch;
  auto finish = [&](FinishReason r) {
    stats_.finish = r;
    stats_.generate_s = Seconds(start);
    return absl::OkStatus();
  };
  for (int64_t i = 0; i < options.max_tokens; ++i) {
    if (cancel_requested()) {
      stats_.generate_s = Seconds(start);
      return absl::CancelledError("cancelled");
    }
    auto t0 = std::chrono::steady_clock::now();
    scratch = logits_;
    int32_t token = sampler.Sample(absl::MakeSpan(scratch), history_);
    stats_.sample_s += Seconds(t0);
    const bool eog = options.stop_at_eog && tok->IsEndOfGeneration(token);
    // Every sampled token goes into the context, the end-of-turn token too, so a later turn
    // continues from a complete conversation.
    if (cache_.size() < cache_.n_ctx()) {
      MOE_RETURN_IF_ERROR(Forward({&token, 1}, LogitsFor::kLast));
      history_.push_back(token);
      n_past_.store(cache_.size(), std::memory_order_relaxed);
    }
    if (eog) {
      std::string rest = stops.Flush();
      if (!rest.empty() && callback) callback(-1, rest);
      return finish(FinishReason::kEndOfGeneration);
    }
    ++stats_.generated_tokens;
    MOE_ASSIGN_OR_RETURN(std::string piece, decoder.Add(token));
    StopMatcher::Result r = stops.Push(piece);
    bool keep_going = !callback || callback(token, r.emit);
    if (r.stopped) return finish(FinishReason::kStopString);
    if (!keep_going) return finish(FinishReason::kCallback);
    if (cache_.size() >= cache_.n_ctx()) {
      std::string rest = stops.Flush() + decoder.Flush();
      if (!rest.empty() && callback) callback(-1, rest);
      return finish(FinishReason::kContextFull);
    }
  }
  std::string rest = stops.Flush() + decoder.Flush();
  if (!rest.empty() && callback) callback(-1, rest);
  return finish(FinishReason::kMaxTokens);
}

absl::Status Session::Reset() {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  cache_.set_size(0);
  cache_.DropCheckpointsAfter(0);
  n_past_.store(0, std::memory_order_relaxed);
  history_.clear();
  state_stale_ = false;
  routing_history_.Clear();
  logits_.clear();
  stats_ = SessionStats();
  rng_calls_ = 0;
  return absl::OkStatus();
}

absl::Status Session::SetDisabledExperts(int layer, absl::Span<const int32_t> experts) {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  const Model& model = *engine_->model();
  MOE_ASSIGN_OR_RETURN(std::vector<bool> off, ExpertMask(model, layer, experts));
  const HParams& h = model.hp();
  if (disabled_experts_.empty()) disabled_experts_.assign(h.n_layer, {});
  disabled_experts_[layer] = std::move(off);
  transformer_.set_disabled_experts(disabled_experts_);
  return absl::OkStatus();
}

absl::Status Session::SetRoutingCallback(RoutingCallback callback) {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  if (!callback) {
    transformer_.set_routing_observer(nullptr);
    return absl::OkStatus();
  }
  // A step's rows are the positions from the cache's size on (it grows when the step ends).
  transformer_.set_routing_observer(
      [this, callback = std::move(callback)](int layer, int64_t rows, int k, const int32_t* experts,
                                             const float* weights, const float* /*inputs*/) {
        const int64_t first = cache_.size();
        for (int64_t r = 0; r < rows; ++r) {
          callback(first + r, layer, absl::MakeConstSpan(experts + r * k, k),
                   absl::MakeConstSpan(weights + r * k, k));
        }
      });
  return absl::OkStatus();
}

absl::Status Session::Truncate(int64_t n_keep) {
  Busy busy(*this);
  MOE_RETURN_IF_ERROR(busy.status());
  if (n_keep < 0 || n_keep > cache_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("cannot keep ", n_keep, " of ", cache_.size(), " tokens"));
  }
  // Entries past n_keep are simply overwritten later; causal attention never reads them. A
  // sliding-window ring may have reused the rows of the window before n_keep, though: then the
  // kept tokens are computed again.
  const bool recompute = !cache_.RingsHoldWindowAt(n_keep);
  cache_.DropCheckpointsAfter(n_keep);
  if (recompute && cache_.recurrent()) {
    // From the latest checkpoint at or before n_keep; the logits of the last kept token stay.
    history_.resize(n_keep);
    state_stale_ = true;
    return RecomputeIfStale();
  }
  std::vector<int32_t> kept(history_.begin(), history_.begin() + n_keep);
  cache_.set_size(recompute ? 0 : n_keep);
  history_.resize(recompute ? 0 : n_keep);
  n_past_.store(cache_.size(), std::memory_order_relaxed);
  logits_.clear();
  if (recompute && !kept.empty()) MOE_RETURN_IF_ERROR(DecodeLocked(kept, nullptr));
  logits_.clear();  // as after any truncation: the next generation computes the last token again
  return absl::OkStatus();
}

}  // namespace moe
