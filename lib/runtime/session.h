// A Session is one conversation: a KV cache, a sampler and the generate loop. One call at a time
// may run on a Session: a call that overlaps another gets Aborted "busy" (every public call takes
// part, the read-only ones through Inspect). Cancel() may be called from any thread at any time,
// and from a signal handler: it is lock-free.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/moe/router.h"
#include "lib/moe/routing_history.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/expert_parallel.h"
#include "lib/sampling/sampler.h"

namespace moe {

struct SessionOptions {
  int64_t n_ctx = 0;  // 0: the model's trained context, at most 4096
  int threads = 0;    // 0: one per core
  DType kv_type = DType::kF32;
  uint64_t seed = 0;
  int64_t n_batch = 64;  // prompt tokens per forward call (a cancellation point between calls)
  RoutingPolicy routing;  // off by default: every token takes the model's top-k
  // For an engine loaded for expert parallelism (LoadOptions::expert_world): rank 0 of the world
  // whose other ranks serve (ServeExpertParallel). Not owned; outlives the session.
  Communicator* communicator = nullptr;
};

// The KV cache a session with these options has (n_ctx resolved as Session::Create does), in the
// memory of the backend that will compute on it.
absl::StatusOr<KvCache> CreateSessionCache(const Model& model, const SessionOptions& options,
                                           MemorySpace& memory);

struct GenerateOptions {
  SamplerConfig sampling;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;
  bool parse_special = false;  // recognise control-token markup in the prompt text
  bool stop_at_eog = true;     // false: generate max_tokens whatever comes (benchmarks, tests)
};

enum class FinishReason {
  kNone,
  kEndOfGeneration,
  kMaxTokens,
  kStopString,
  kCallback,
  kContextFull,
  kCancelled,  // the batch engine: Cancel was called, or the engine was destroyed
  kError,      // the batch engine: its step failed (the result's status says why)
};

// Per-call statistics (the last Decode or Generate call).
struct SessionStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prompt_s = 0;
  double generate_s = 0;
  double sample_s = 0;
  Telemetry forward;  // stages, expert counts, bytes read
  FinishReason finish = FinishReason::kNone;
  // What the engine's expert cache did during the call (zero when every expert is resident).
  ExpertCacheStats expert_cache;
  std::vector<ExpertCacheStats> expert_cache_layers;  // the same per layer
};

class Session {
 public:
  // Called for each generated token with the text it completes (possibly empty while a UTF-8
  // character or a possible stop string is incomplete); return false to stop.
  using TokenCallback = std::function<bool(int32_t token, absl::string_view piece)>;

  static absl::StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<const Engine> engine,
                                                         const SessionOptions& options);
  ~Session();

  // Appends tokens to the context; afterwards logits() are those of the last token. With
  // all_logits, every token's logits row is appended there too ([n x n_vocab]).
  absl::Status Decode(absl::Span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);
  absl::Span<const float> logits() const { return logits_; }
  absl::StatusOr<int32_t> Sample(const SamplerConfig& config);

  // Appends the prompt (tokenized; BOS added when the context is empty and the vocabulary wants
  // it) and generates a continuation, reusing everything already in the context.
  absl::Status Generate(absl::string_view prompt, const GenerateOptions& options,
                        const TokenCallback& callback);
  absl::Status GenerateFromTokens(absl::Span<const int32_t> prompt, const GenerateOptions& options,
                                  const TokenCallback& callback);

  // Asks the running call to stop soon (it returns Cancelled); does nothing when none runs, so a
  // cancellation never leaks into a later call.
  void Cancel();
  // Cancels the running call, if any, and waits until it has returned. Must not be called from
  // the thread running that call (e.g. from its token callback): see RunningOnThisThread().
  void CancelAndWait();
  // Whether the calling thread is the one running a call on this session right now.
  bool RunningOnThisThread() const;

  // Restores what a fresh session has: no tokens, no logits, the sampler streams from the start.
  absl::Status Reset();
  // Keeps the first n_keep tokens. The sampler streams go on (a later sample is not a repeat).
  absl::Status Truncate(int64_t n_keep);

  // Told, during later calls, each token's routing as the context processes it: its position,
  // each MoE layer's experts and weights (k of each; -1 and 0 where it ran fewer). On the calling
  // thread. Null stops it. Aborted "busy" if a call runs.
  using RoutingCallback =
      std::function<void(int64_t position, int layer, absl::Span<const int32_t> experts,
                         absl::Span<const float> weights)>;
  absl::Status SetRoutingCallback(RoutingCallback callback);

  // Switches experts of one MoE layer off for later calls: the router never picks them (it takes
  // the best of the others; weights keep their meaning over all experts). `experts` replaces the
  // layer's set; empty switches them all back on. InvalidArgument for a layer without routed
  // experts, an expert out of range, or a set that leaves the layer none; Aborted "busy" if a
  // call runs.
  absl::Status SetDisabledExperts(int layer, absl::Span<const int32_t> experts);

  // Runs f while holding the call slot, so that what f reads (stats(), logits()) is not being
  // written by a call on another thread; Aborted "busy" if a call runs.
  absl::Status Inspect(const std::function<void()>& f);

  // Safe from any thread, also during a call (then some count that call has reached).
  int64_t n_past() const { return n_past_.load(std::memory_order_relaxed); }
  int64_t n_ctx() const { return cache_.n_ctx(); }
  const std::vector<int32_t>& history() const { return history_; }
  const SessionStats& stats() const { return stats_; }
  const Engine& engine() const { return *engine_; }

 private:
  Session(std::shared_ptr<const Engine> engine, std::unique_ptr<Backend> backend, KvCache cache,
          const SessionOptions& options);
  absl::Status DecodeLocked(absl::Span<const int32_t> tokens, std::vector<float>* all_logits);
  absl::Status GenerateLocked(absl::Span<const int32_t> prompt, const GenerateOptions& options,
                              const TokenCallback& callback);
  // One forward step over `tokens` after the cache's, announced first to the serving ranks when
  // the experts are spread over a world.
  absl::Status Forward(absl::Span<const int32_t> tokens, LogitsFor which);
  // After a step failed part way, a recurrent layer's state has taken in some of its tokens:
  // the history is computed again before anything else runs.
  absl::Status RecomputeIfStale();

  // RAII holder of the call slot (state_'s kInCall bit).
  class Busy;
  static constexpr uint32_t kInCall = 1, kCancelRequested = 2;
  bool cancel_requested() const { return state_.load() & kCancelRequested; }

  std::shared_ptr<const Engine> engine_;
  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  Transformer transformer_;
  std::unique_ptr<StepDriver> driver_;  // with expert parallelism
  KvCache cache_;
  std::vector<int32_t> history_;  // every token in the cache, in order
  bool state_stale_ = false;      // RecomputeIfStale
  // Every position's routing, when load-aware re-weighting needs it (a truncated sequence reads
  // only the positions it kept, each overwritten as it is computed again).
  RoutingHistory routing_history_;
  RoutingHistory* routing_history() {
    return options_.routing.load_window > 0 ? &routing_history_ : nullptr;
  }
  std::vector<std::vector<bool>> disabled_experts_;  // [layer][expert]; empty: none
  std::vector<float> logits_;
  // kInCall while a call runs; kCancelRequested only ever set while kInCall is, and cleared with
  // it when the call ends.
  std::atomic<uint32_t> state_{0};
  std::atomic<std::thread::id> running_thread_{};
  std::atomic<int64_t> n_past_{0};  // cache_.size(), published for readers on other threads
  SessionStats stats_;
  uint64_t rng_calls_ = 0;
};

}  // namespace moe
