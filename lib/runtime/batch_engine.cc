#include "lib/runtime/batch_engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/runtime/expert_mask.h"
#include "lib/runtime/stop_matcher.h"
#include "lib/sampling/sampler.h"
#include "lib/tokenizer/stream_decoder.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// A model holding one rank's share of the experts runs over its world from rank 0, with the
// dense weights there alone (the serving ranks keep no KV cache to mirror a paged one); a whole
// model runs in this process.
absl::Status CheckWorld(const Engine& engine, const Communicator* comm) {
  const ExpertRanks* ranks = engine.expert_ranks();
  if (ranks == nullptr) {
    if (comm != nullptr && comm->size() > 1) {
      return absl::FailedPreconditionError(
          "a world of ranks needs the model loaded for expert parallelism (expert_world)");
    }
    return absl::OkStatus();
  }
  if (comm == nullptr || comm->size() != ranks->world() || comm->rank() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("this model holds its share of the experts of a world of ", ranks->world(),
                     " ranks: the batching engine runs on rank 0 of that world (its communicator "
                     "in the options; the others serve)"));
  }
  if (!ranks->dense_on_root_only()) {
    return absl::UnimplementedError(
        "the batching engine runs over ranks with the dense weights on rank 0 only "
        "(LoadOptions::dense_on_root_only, --dense-on-rank0); with them on every rank each would "
        "have to mirror the engine's paged KV cache");
  }
  return absl::OkStatus();
}

// Whether requests start from cached prefix blocks: load-aware re-weighting reads the routing of
// every earlier position, which cached blocks do not keep, so its requests compute their prompts.
bool ReusesPrefixes(const BatchEngineOptions& o) {
  return o.prefix_sharing && o.routing.load_window == 0;
}

}  // namespace

struct BatchEngine::Request {
  Request(uint64_t id, RequestOptions o, RequestCallback cb, std::vector<int32_t> prompt,
          PagedKvSequence kv, const Tokenizer& tok)
      : id(id),
        options(std::move(o)),
        callback(std::move(cb)),
        tokens(std::move(prompt)),
        prompt_size(static_cast<int64_t>(tokens.size())),
        kv(std::move(kv)),
        sampler(options.generate.sampling),
        // The continuation follows the prompt, so the SentencePiece leading space is real text.
        decoder(tok, DecodeOptions{/*render_special=*/false}, /*at_text_start=*/false),
        stops(options.generate.stop) {}

  uint64_t id;
  RequestOptions options;
  RequestCallback callback;
  std::vector<int32_t> tokens;  // the prompt, then every token sampled
  int64_t prompt_size;
  int64_t computed = 0;  // leading tokens whose K/V the table holds
  PagedKvSequence kv;
  RoutingHistory routing_history;  // for load-aware re-weighting
  SequenceCost prompt_cost, decode_cost;  // what its steps computed, recomputation included
  Sampler sampler;
  StreamDecoder decoder;
  StopMatcher stops;
  RequestResult result;
  bool admitted = false, preempted = false, done = false;
  Clock::time_point submitted = Clock::now(), first_token, last_token;

  // Whether its next step is a decode step: the one token sampled last, after the whole prompt.
  bool decoding() const {
    return computed >= prompt_size && static_cast<int64_t>(tokens.size()) - computed == 1;
  }
};

struct BatchEngine::Scheduled {
  Request* r;
  int64_t m;  // tokens this step computes
};

absl::StatusOr<std::unique_ptr<BatchEngine>> BatchEngine::Create(
    std::shared_ptr<const Engine> engine, const BatchEngineOptions& options) {
  if (!engine) return absl::InvalidArgumentError("no model");
  MOE_RETURN_IF_ERROR(CheckWorld(*engine, options.communicator));
  MOE_RETURN_IF_ERROR(engine->RequireTokenizer().status());
  const HParams& h = engine->model()->hp();
  int64_t n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min<int64_t>(h.n_ctx_train, 4096);
  if (n_ctx <= 0) n_ctx = 4096;
  if (options.n_ctx < 0 || n_ctx > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid context length ", options.n_ctx));
  }
  const int bs = options.block_size;
  if (bs < 1 || bs > 65536 || (bs & (bs - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block size ", bs, ": a power of two from 1 to 65536"));
  }
  if (options.max_sequences < 1 || options.max_sequences > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sequences ", options.max_sequences, ": from 1 to 4096"));
  }
  MOE_RETURN_IF_ERROR(CheckRoutingPolicy(options.routing));
  if (options.max_step_tokens < 1) {
    return absl::InvalidArgumentError("max_step_tokens must be positive");
  }
  if (options.kv_tokens < 0) return absl::InvalidArgumentError("kv_tokens must not be negative");
  PagedKvCacheOptions kv;
  kv.shape = {h.n_layer, h.n_head_kv, h.head_dim, options.kv_type, 0, h.values_in_keys()};
  while ((1 << kv.shape.block_shift) < bs) ++kv.shape.block_shift;
  kv.shape.conv_width = engine->model()->conv_widths();
  kv.shape.conv_rows = engine->model()->conv_rows();
  kv.shape.state_floats = engine->model()->state_floats();
  kv.windows = engine->model()->attention_windows();
  kv.positions = options.kv_tokens > 0 ? options.kv_tokens : std::max<int64_t>(16384, n_ctx);
  if (kv.positions > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("a KV cache of ", kv.positions, " tokens"));
  }
  kv.bytes = options.kv_bytes;
  kv.max_sequences = options.max_sequences;
  kv.max_step_tokens = options.max_step_tokens;
  // Snapshots of the recurrent layers' slots serve only prompts that reuse a cached prefix.
  kv.state_snapshots = ReusesPrefixes(options);
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, engine->CreateBackend(options.threads));
  kv.memory = backend.get();
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(kv);
  if (absl::IsResourceExhausted(cache.status())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the engine's paged KV cache: ", cache.status().message(),
        " (ask for fewer positions, kv_tokens or kv_bytes, fewer max_sequences, or a smaller KV "
        "type: f16, q8_0)"));
  }
  if (!cache.ok()) return cache.status();
  auto e = std::unique_ptr<BatchEngine>(
      new BatchEngine(std::move(engine), options, n_ctx, std::move(backend), *std::move(cache)));
  if (options.own_thread) e->scheduler_ = std::thread([p = e.get()] { p->SchedulerLoop(); });
  return e;
}

BatchEngine::BatchEngine(std::shared_ptr<const Engine> engine, const BatchEngineOptions& options,
                         int64_t n_ctx, std::unique_ptr<Backend> backend,
                         std::unique_ptr<PagedKvCache> cache)
    : engine_(std::move(engine)),
      options_(options),
      n_ctx_(n_ctx),
      backend_(std::move(backend)),
      transformer_(engine_->model(), backend_.get()),
      cache_(std::move(cache)) {
  engine_->PrepareTransformer(&transformer_, options.routing);
  if (const ExpertRanks* ranks = engine_->expert_ranks(); ranks != nullptr) {
    driver_ = std::make_unique<StepDriver>(options.communicator, *engine_->model(), *ranks);
    transformer_.set_expert_parallel(options.communicator, ranks);
  }
  stats_.kv_blocks = cache_->n_blocks();
  stats_.block_size = cache_->block_size();
  stats_.kv_window_blocks = cache_->window_blocks();
  stats_.kv_state_slots = cache_->state_slots();
  stats_.kv_bytes = static_cast<int64_t>(cache_->byte_size());
}

BatchEngine::~BatchEngine() { (void)Close(); }

absl::Status BatchEngine::Close() {
  if (OnSteppingThread()) {
    return absl::FailedPreconditionError("the engine cannot be closed from its own callback");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  // What is left ends as cancelled, its callback told, so no caller waits on it forever.
  std::lock_guard<std::mutex> step(step_mu_);
  std::vector<std::unique_ptr<Request>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : incoming_) left.push_back(std::move(r));
    incoming_.clear();
  }
  for (auto& r : running_) left.push_back(std::move(r));
  for (auto& r : waiting_) left.push_back(std::move(r));
  running_.clear();
  waiting_.clear();
  for (auto& r : left) Finish(*r, FinishReason::kCancelled, absl::CancelledError("engine closed"));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BatchEngine::Submit(const RequestOptions& request,
                                             RequestCallback callback) {
  const Tokenizer* tok = engine_->tokenizer();  // Create checked there is one
  std::vector<int32_t> prompt = request.tokens;
  if (prompt.empty()) {
    EncodeOptions eo;
    eo.add_bos = tok->data().add_bos;
    eo.parse_special = request.parse_special;
    prompt = tok->Encode(request.prompt, eo);
  }
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt: nothing to continue from");
  const int64_t n_vocab = engine_->model()->hp().n_vocab;
  for (int32_t t : prompt) {
    if (t < 0 || t >= n_vocab) {
      return absl::OutOfRangeError(
          absl::StrCat("token id ", t, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n >= n_ctx_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt too long: ", n, " tokens leave no room to generate in a context of ", n_ctx_));
  }
  if (!cache_->EverHolds(n + 1)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prompt too long: ", n, " tokens and one more never fit the KV cache of ",
                     cache_->positions(), " positions"));
  }
  if (request.generate.max_tokens < 0) {
    return absl::InvalidArgumentError("max_tokens must not be negative");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return absl::FailedPreconditionError("the engine is closing");
  const uint64_t id = next_id_++;
  incoming_.push_back(std::make_unique<Request>(id, request, std::move(callback), std::move(prompt),
                                                cache_->NewSequence(), *tok));
  live_[id] = request.keep_result;
  ++stats_.submitted;
  lock.unlock();
  work_.notify_all();
  return id;
}

absl::Status BatchEngine::Cancel(uint64_t request) {
  std::unique_lock<std::mutex> lock(mu_);
  if (request == 0 || request >= next_id_) {
    return absl::NotFoundError(absl::StrCat("no request ", request));
  }
  if (!live_.contains(request)) return absl::OkStatus();  // finished already
  cancels_.push_back(request);
  lock.unlock();
  work_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<RequestResult> BatchEngine::Wait(uint64_t request, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return results_.contains(request) || !live_.contains(request); };
  if (!ready() && OnSteppingThread()) {
    return absl::FailedPreconditionError(
        "Wait from a callback or the stepping thread would never return: the request can only "
        "finish once this step is over");
  }
  if (auto it = live_.find(request); it != live_.end() && !it->second) {
    return absl::FailedPreconditionError(
        absl::StrCat("request ", request, " keeps no result (keep_result was false)"));
  }
  if (timeout_s < 0) {
    finished_.wait(lock, ready);
  } else if (!finished_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready)) {
    return absl::DeadlineExceededError(
        absl::StrCat("request ", request, " still running after ", timeout_s, " s"));
  }
  auto it = results_.find(request);
  if (it == results_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no result for request ", request, " (unknown id, or its result was taken)"));
  }
  RequestResult r = std::move(it->second);
  results_.erase(it);
  return r;
}

absl::StatusOr<RequestResult> BatchEngine::TryWait(uint64_t request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_.contains(request) && !results_.contains(request)) {
      if (!live_[request]) {
        return absl::FailedPreconditionError(
            absl::StrCat("request ", request, " keeps no result (keep_result was false)"));
      }
      return absl::UnavailableError(absl::StrCat("request ", request, " has not finished"));
    }
  }
  return Wait(request, 0);
}

absl::StatusOr<bool> BatchEngine::Step() {
  if (options_.own_thread) {
    return absl::FailedPreconditionError("this engine steps on its own thread");
  }
  if (OnSteppingThread()) return absl::FailedPreconditionError("Step from within a step");
  std::lock_guard<std::mutex> step(step_mu_);
  return StepLocked();
}

bool BatchEngine::OnSteppingThread() const {
  return stepping_thread_.load() == std::this_thread::get_id();
}

void BatchEngine::SchedulerLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !cancels_.empty() ||
               stats_.running + stats_.waiting > 0;
      });
      if (stopping_) return;
    }
    std::lock_guard<std::mutex> step(step_mu_);
    absl::StatusOr<bool> worked = StepLocked();
    if (worked.ok() && !*worked) {
      // Nothing could run (cannot last: an idle engine fits any request); do not spin.
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

void BatchEngine::AdmitIncoming(std::unique_lock<std::mutex>& lock) {
  std::vector<std::unique_ptr<Request>> incoming = std::move(incoming_);
  std::vector<uint64_t> cancels = std::move(cancels_);
  incoming_.clear();
  cancels_.clear();
  lock.unlock();
  for (auto& r : incoming) waiting_.push_back(std::move(r));
  for (uint64_t id : cancels) {
    auto match = [&](const std::unique_ptr<Request>& r) { return r->id == id && !r->done; };
    Request* r = nullptr;
    if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
      r = it->get();
    } else if (auto w = std::find_if(waiting_.begin(), waiting_.end(), match);
               w != waiting_.end()) {
      r = w->get();
    }
    if (r != nullptr) Finish(*r, FinishReason::kCancelled, absl::CancelledError("cancelled"));
  }
  lock.lock();
}

absl::Status BatchEngine::SetDisabledExperts(int layer, absl::Span<const int32_t> experts) {
  MOE_ASSIGN_OR_RETURN(std::vector<bool> off, ExpertMask(*engine_->model(), layer, experts));
  std::lock_guard<std::mutex> lock(mu_);
  if (disabled_experts_.empty()) disabled_experts_.assign(engine_->model()->hp().n_layer, {});
  disabled_experts_[layer] = std::move(off);
  disabled_changed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<bool> BatchEngine::StepLocked() {
  stepping_thread_.store(std::this_thread::get_id());
  struct Clear {
    std::atomic<std::thread::id>& t;
    ~Clear() { t.store(std::thread::id()); }
  } clear{stepping_thread_};
  {
    std::unique_lock<std::mutex> lock(mu_);
    AdmitIncoming(lock);
    if (disabled_changed_) {
      transformer_.set_disabled_experts(disabled_experts_);
      disabled_changed_ = false;
    }
  }
  const auto t0 = Clock::now();
  std::vector<Scheduled> batch = Schedule();
  bool worked = !batch.empty();
  if (!batch.empty()) {
    std::vector<SequenceChunk> chunks;
    chunks.reserve(batch.size());
    for (const Scheduled& s : batch) {
      Request& r = *s.r;
      const bool last = r.computed + s.m == static_cast<int64_t>(r.tokens.size());
      chunks.push_back({absl::MakeConstSpan(r.tokens).subspan(r.computed, s.m), r.computed, &r.kv,
                        last ? LogitsFor::kLast : LogitsFor::kNone,
                        options_.routing.load_window > 0 ? &r.routing_history : nullptr,
                        r.decoding() ? &r.decode_cost : &r.prompt_cost});
    }
    const HParams& h = engine_->model()->hp();
    step_telemetry_.Reset(h.n_layer, h.n_expert);
    absl::Status status = driver_ ? driver_->in_step() : absl::OkStatus();
    if (status.ok()) status = transformer_.ForwardBatch(chunks, &logits_, &step_telemetry_);
    if (!status.ok() && driver_) driver_->Break(status);
    int64_t row = 0, tokens = 0, decode = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      Request& r = *batch[i].r;
      tokens += batch[i].m;
      if (!status.ok()) {
        Finish(r, FinishReason::kError, status);
        continue;
      }
      decode += r.decoding();
      r.computed += batch[i].m;
      if (options_.prefix_sharing) cache_->Commit(r.kv, r.tokens, r.computed);
      if (chunks[i].logits == LogitsFor::kLast) {
        Advance(r, absl::MakeConstSpan(logits_).subspan(row * h.n_vocab, h.n_vocab));
        ++row;
      }
    }
    int64_t experts = 0;
    for (const auto& layer : step_telemetry_.expert_counts) {
      for (int64_t c : layer) experts += c > 0;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
    stats_.tokens += tokens;
    stats_.decode_tokens += decode;
    stats_.rerouted_choices += step_telemetry_.rerouted_choices;
    stats_.dropped_choices += step_telemetry_.dropped_choices;
    stats_.reweighted_choices += step_telemetry_.reweighted_choices;
    stats_.step_s += Seconds(t0, Clock::now());
    stats_.exchange_bytes += step_telemetry_.exchange_bytes;
    stats_.exchange_s += step_telemetry_.exchange_s;
    stats_.time += step_telemetry_.time;
    sum_sequences_ += static_cast<double>(batch.size());
    sum_experts_ += static_cast<double>(experts) / std::max<int64_t>(h.n_layer, 1);
  }
  // Finished requests leave; preempted ones go back to the front of the queue, oldest first.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if ((*it)->preempted && !(*it)->done) {
      (*it)->preempted = false;
      waiting_.push_front(std::move(*it));
    }
  }
  std::erase_if(running_, [](const std::unique_ptr<Request>& r) { return !r || r->done; });
  std::erase_if(waiting_, [](const std::unique_ptr<Request>& r) { return r->done; });
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.waiting = static_cast<int64_t>(waiting_.size() + incoming_.size());
  PublishPoolLocked();
  if (stats_.steps > 0) {
    stats_.mean_sequences_per_step = sum_sequences_ / stats_.steps;
    stats_.mean_tokens_per_step = static_cast<double>(stats_.tokens) / stats_.steps;
    stats_.mean_experts_per_step = sum_experts_ / stats_.steps;
  }
  return worked;
}

std::vector<BatchEngine::Scheduled> BatchEngine::Schedule() {
  std::vector<Scheduled> batch;
  int64_t budget = options_.max_step_tokens;
  auto need = [](const Request& r) { return static_cast<int64_t>(r.tokens.size()) - r.computed; };
  auto live = [](const Request& r) { return !r.done && !r.preempted; };
  // Requests generating first, one token each, oldest first; then the prompts being read.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Request& r = *running_[i];
      if (!live(r) || r.decoding() != (pass == 0)) continue;
      const int64_t m = std::min(need(r), budget);
      if (!Grow(r, r.computed + m, batch)) continue;
      batch.push_back({&r, m});
      budget -= m;
    }
  }
  // Then new requests, first come first served, while there is room for their whole prompt.
  while (!waiting_.empty() && budget > 0 && running_count() < options_.max_sequences) {
    Request& r = *waiting_.front();
    if (!r.done && !cache_->EverHolds(static_cast<int64_t>(r.tokens.size()) + 1)) {
      Finish(r, FinishReason::kContextFull);  // preempted after growing past what the cache holds
    }
    if (r.done) {
      waiting_.pop_front();
      continue;
    }
    Admit(r);
    if (!r.admitted) break;  // no room for it yet
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (r.options.generate.max_tokens == 0) {
      Finish(r, FinishReason::kMaxTokens);
      continue;
    }
    const int64_t m = std::min(need(r), budget);
    if (!Grow(r, r.computed + m, batch)) break;
    batch.push_back({&r, m});
    budget -= m;
  }
  return batch;
}

void BatchEngine::Admit(Request& r) {
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  const int64_t reused = ReusesPrefixes(options_) ? cache_->ReusePrefix(r.kv, r.tokens) : 0;
  // Room for the whole prompt (and the first token after it) now, counting blocks a chain of
  // cached ones could give up.
  if (!cache_->CanGrow(r.kv, reused, n + 1)) {
    cache_->Release(r.kv);
    return;
  }
  r.computed = reused;
  r.admitted = true;
  const auto now = Clock::now();
  if (r.result.stats.preemptions == 0) {
    r.result.stats.queue_s = Seconds(r.submitted, now);
    r.result.stats.prompt_tokens = r.prompt_size;
    r.result.stats.prefix_tokens_reused = reused;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.prefix_tokens_reused += r.computed;
}

int64_t BatchEngine::running_count() const {
  return std::count_if(running_.begin(), running_.end(), [](const std::unique_ptr<Request>& r) {
    return r && !r->done && !r->preempted;
  });
}

bool BatchEngine::Grow(Request& r, int64_t positions, std::vector<Scheduled>& batch) {
  while (!cache_->Grow(r.kv, r.computed, positions).ok()) {
    if (options_.when_full == WhenKvFull::kFinish) {
      Finish(r, FinishReason::kContextFull);
      return false;
    }
    // The youngest running request gives its blocks up: the one that arrived last loses least.
    Request* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (!(*it)->done && !(*it)->preempted) {
        victim = it->get();
        break;
      }
    }
    if (victim == nullptr) victim = &r;
    if (victim == &r && running_count() == 1) {
      // Alone and still without room: the cache is too small for this request, now or later.
      Finish(r, FinishReason::kContextFull);
      return false;
    }
    std::erase_if(batch, [&](const Scheduled& s) { return s.r == victim; });
    Preempt(*victim);
    if (victim == &r) return false;
  }
  return true;
}

void BatchEngine::Preempt(Request& r) {
  ReleaseBlocks(r);
  r.computed = 0;
  r.preempted = true;
  r.admitted = false;
  ++r.result.stats.preemptions;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.preemptions;
}

void BatchEngine::ReleaseBlocks(Request& r) { cache_->Release(r.kv); }

void BatchEngine::Advance(Request& r, absl::Span<const float> logits) {
  const Tokenizer& tok = *engine_->tokenizer();
  const GenerateOptions& g = r.options.generate;
  std::vector<float> scratch(logits.begin(), logits.end());
  const int32_t token = r.sampler.Sample(absl::MakeSpan(scratch), r.tokens);
  const auto now = Clock::now();
  if (r.result.stats.generated_tokens == 0) {
    r.first_token = now;
    r.result.stats.first_token_s = Seconds(r.submitted, now);
  }
  r.last_token = now;
  if (g.stop_at_eog && tok.IsEndOfGeneration(token)) {
    Finish(r, FinishReason::kEndOfGeneration);
    return;
  }
  r.tokens.push_back(token);
  r.result.tokens.push_back(token);
  ++r.result.stats.generated_tokens;
  absl::StatusOr<std::string> piece = r.decoder.Add(token);
  if (!piece.ok()) {
    Finish(r, FinishReason::kError, piece.status());
    return;
  }
  StopMatcher::Result sr = r.stops.Push(*piece);
  r.result.text += sr.emit;
  RequestEvent event;
  event.request = r.id;
  event.token = token;
  event.piece = std::move(sr.emit);
  const bool keep_going = !r.callback || r.callback(event);
  if (sr.stopped) {
    Finish(r, FinishReason::kStopString);
  } else if (!keep_going) {
    Finish(r, FinishReason::kCallback);
  } else if (static_cast<int64_t>(r.tokens.size()) >= n_ctx_) {
    Finish(r, FinishReason::kContextFull);
  } else if (r.result.stats.generated_tokens >= g.max_tokens) {
    Finish(r, FinishReason::kMaxTokens);
  }
}

void BatchEngine::Finish(Request& r, FinishReason reason, absl::Status status) {
  if (r.done) return;
  r.done = true;
  ReleaseBlocks(r);
  RequestEvent event;
  event.request = r.id;
  event.finish = reason;
  event.status = status;
  // What a stop string held back is text after all; at the end of a turn a partial UTF-8
  // character is dropped (as Session does), otherwise its bytes are kept.
  if (reason != FinishReason::kStopString && reason != FinishReason::kCallback) {
    event.piece = r.stops.Flush();
    if (reason != FinishReason::kEndOfGeneration) event.piece += r.decoder.Flush();
  }
  r.result.text += event.piece;
  r.result.finish = reason;
  r.result.status = std::move(status);
  RequestStats& st = r.result.stats;
  const auto now = Clock::now();
  st.total_s = Seconds(r.submitted, now);
  if (st.generated_tokens > 1) {
    const double s = Seconds(r.first_token, r.last_token);
    st.decode_tok_s = s > 0 ? (st.generated_tokens - 1) / s : 0;
  }
  st.weight_bytes = r.prompt_cost.weight_bytes + r.decode_cost.weight_bytes;
  st.multiply_adds = r.prompt_cost.multiply_adds + r.decode_cost.multiply_adds;
  if (r.decode_cost.tokens > 0) {
    const auto per_token = [&](int64_t v) {
      return static_cast<double>(v) / static_cast<double>(r.decode_cost.tokens);
    };
    st.decode_weight_bytes_per_token = per_token(r.decode_cost.weight_bytes);
    st.decode_multiply_adds_per_token = per_token(r.decode_cost.multiply_adds);
  }
  event.result = &r.result;
  if (r.callback) r.callback(event);
  // The event's copy of the status shares the result's: let go of it before another thread may
  // take the result, so the last release is ordered by mu_ rather than by the reference count
  // alone (whose decrement lives in Abseil's library, out of ThreadSanitizer's sight).
  event.status = absl::OkStatus();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(r.id);
    if (it != live_.end()) {
      if (it->second) results_[r.id] = std::move(r.result);
      live_.erase(it);
    }
    ++stats_.finished;
    PublishPoolLocked();
  }
  finished_.notify_all();
}

void BatchEngine::PublishPoolLocked() {
  // The pool changes only on the stepping thread, which is this one.
  stats_.kv_blocks_in_use = cache_->blocks_in_use();
  stats_.kv_blocks_cached = cache_->blocks_cached();
  stats_.kv_window_blocks_in_use = cache_->window_blocks_in_use();
  stats_.kv_window_blocks_cached = cache_->window_blocks_cached();
  stats_.kv_state_slots_in_use = cache_->state_slots_in_use();
  stats_.kv_state_slots_cached = cache_->state_slots_cached();
}

BatchEngineStats BatchEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace moe
