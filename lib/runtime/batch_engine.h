// The batching engine (issue 17): many requests over one model, stepped together. Each step runs
// the new tokens of every running request in one batched forward pass — a decode token for each
// request that is generating, and chunks of the prompts being read, within a token budget — so a
// routed expert that several requests chose is read once for all of them.
//
// Requests keep their K/V in one paged cache (PagedKvCache): a prompt that starts with full blocks
// another request already computed (a shared system prompt) reuses them, and sliding-window
// layers hold only the blocks their window still reads. When
// the cache cannot grow, the youngest running request is preempted (its blocks freed, its tokens
// computed again later) or, as the options say, the request that needs room finishes with
// kContextFull.
//
// Any thread may call Submit, Cancel, Wait, TryWait and the statistics at any time. Callbacks run
// on the thread that steps the engine: the engine's own scheduler thread, or, with
// own_thread = false, whichever thread calls Step(). A callback may call Submit, Cancel, TryWait
// and the statistics; it must not call Wait on a request that has not finished, Step, or destroy
// the engine (Wait and Step then return FailedPrecondition instead of deadlocking).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/backend/backend.h"
#include "lib/kv/paged_kv_cache.h"
#include "lib/model/forward.h"
#include "lib/moe/router.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/expert_parallel.h"
#include "lib/runtime/session.h"

namespace moe {

enum class WhenKvFull {
  kPreempt,  // free the youngest running request's blocks; it is computed again later
  kFinish,   // the request that needs room finishes with kContextFull
};

struct BatchEngineOptions {
  int threads = 0;              // compute threads; 0: one per core
  DType kv_type = DType::kF16;  // F32, F16 or Q8_0
  int block_size = 32;          // positions per KV block, a power of two
  // The paged cache's size in tokens, or in bytes when kv_bytes is set; 0 and 0: 16384 tokens
  // (or n_ctx, if larger). Tokens count the layers that see the whole context; sliding-window
  // layers take room for max_sequences windows besides (with bytes, out of the same bytes).
  int64_t kv_tokens = 0;
  size_t kv_bytes = 0;
  int64_t n_ctx = 0;              // the most tokens one request holds; 0: the model's, at most 4096
  int max_sequences = 16;         // requests running at once
  int64_t max_step_tokens = 256;  // tokens one step computes (decode tokens first)
  bool prefix_sharing = true;     // off: recurrent layers keep one state slot a request, not two
  WhenKvFull when_full = WhenKvFull::kPreempt;
  bool own_thread = true;  // false: the caller drives the engine with Step()
  // A model loaded as one rank's share of the experts (LoadOptions::expert_world) runs over this
  // world, of which this is rank 0; the others serve (ServeExpertParallel) until rank 0 stops
  // them (StopExpertParallelServers, after the engine is gone). The engine keeps the only KV
  // cache, so the model must hold the dense weights on rank 0 alone (dense_on_root_only): each
  // MoE layer of a step sends its inputs and routing to the others. After a failed exchange the
  // ranks are out of step: the step's requests end with its error, every later one with
  // FailedPrecondition. Nothing else may use the communicator while the engine runs.
  Communicator* communicator = nullptr;
  // Every request's; off by default (lib/moe/router.h). A capacity caps each step's tokens per
  // expert over all its requests; load-aware re-weighting follows each request's own routing
  // (and turns prefix sharing off, as cached blocks do not keep the routing).
  RoutingPolicy routing;
};

struct RequestOptions {
  std::string prompt;           // tokenized with BOS as the vocabulary wants, unless tokens set
  std::vector<int32_t> tokens;  // the prompt as token ids (used as given)
  bool parse_special = false;   // recognise control-token markup in the prompt text
  GenerateOptions generate;     // sampling (with its seed), max tokens, stop strings, EOG
  bool keep_result = true;      // false: only the callback sees it; Wait is an error
};

struct RequestResult;

// What a callback receives: a token and the text it completes (possibly empty while a UTF-8
// character or a possible stop string is incomplete), or, once per request and last, the finish
// (token -1, the text still held back, the reason, the status, and the whole result, valid
// during the call).
struct RequestEvent {
  uint64_t request = 0;
  int32_t token = -1;
  std::string piece;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;
  const RequestResult* result = nullptr;  // the last event only
};
// Return false to end this request (kCallback); the others go on.
using RequestCallback = std::function<bool(const RequestEvent&)>;

struct RequestStats {
  double queue_s = 0;        // submitted until first scheduled
  double first_token_s = 0;  // submitted until its first token was sampled
  double total_s = 0;        // submitted until finished
  double decode_tok_s = 0;   // generated tokens after the first, per second after it
  int64_t prompt_tokens = 0;
  int64_t prefix_tokens_reused = 0;  // prompt positions taken from cached blocks
  int64_t generated_tokens = 0;
  int32_t preemptions = 0;
  // What its tokens cost (SequenceCost): over every token its steps computed (prompt, decode,
  // and what preemption made compute again), and per decode step.
  int64_t weight_bytes = 0;
  int64_t multiply_adds = 0;
  double decode_weight_bytes_per_token = 0;
  double decode_multiply_adds_per_token = 0;
};

struct RequestResult {
  std::vector<int32_t> tokens;  // generated
  std::string text;             // everything its callback events carried
  FinishReason finish = FinishReason::kNone;
  absl::Status status;  // OK, or why it ended in error (kCancelled: Cancel was called)
  RequestStats stats;
};

struct BatchEngineStats {
  int64_t submitted = 0, finished = 0, running = 0, waiting = 0;
  int64_t steps = 0;
  int64_t tokens = 0;         // computed by the steps (prompt and decode)
  int64_t decode_tokens = 0;  // of them, one per generating request and step
  int64_t prefix_tokens_reused = 0;
  int64_t preemptions = 0;
  // The routing policies at work (Telemetry's fields of the same names), over every step.
  int64_t rerouted_choices = 0, dropped_choices = 0, reweighted_choices = 0;
  int32_t kv_blocks = 0, kv_blocks_in_use = 0, kv_blocks_cached = 0;
  int32_t block_size = 0;
  // The sliding-window layers' own blocks (0 when no layer slides): each request holds those its
  // window still reads; cached ones keep the windows of shared prefixes.
  int32_t kv_window_blocks = 0, kv_window_blocks_in_use = 0, kv_window_blocks_cached = 0;
  // The convolution layers' slots (0 when no layer convolves): a live one per running request,
  // snapshots of what followed a block's last position; cached ones end shared prefixes.
  int32_t kv_state_slots = 0, kv_state_slots_in_use = 0, kv_state_slots_cached = 0;
  int64_t kv_bytes = 0;  // the paged cache's memory
  double step_s = 0;  // time in steps
  StageTimes time;    // where the steps' forward passes spent it
  double mean_sequences_per_step = 0;
  double mean_tokens_per_step = 0;
  double mean_experts_per_step = 0;  // distinct (layer, expert) pairs a step ran, per layer
  // Over ranks (BatchEngineOptions::communicator): the bytes of layer inputs and expert outputs
  // rank 0 exchanged with the others, and the time it spent in those exchanges.
  int64_t exchange_bytes = 0;
  double exchange_s = 0;
};

class BatchEngine {
 public:
  static absl::StatusOr<std::unique_ptr<BatchEngine>> Create(std::shared_ptr<const Engine> engine,
                                                             const BatchEngineOptions& options);
  // Close(), then frees everything.
  ~BatchEngine();
  // Finishes every request left as cancelled (callbacks told, waiting threads woken), stops the
  // scheduler thread; later Submits fail. Not from a callback (FailedPrecondition).
  absl::Status Close();
  // Whether the calling thread is stepping the engine now (a callback runs on it).
  bool OnSteppingThread() const;
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Queues a request; its id is returned at once. Errors: no prompt, parameters out of range, a
  // prompt that could never fit (n_ctx, or the whole cache).
  absl::StatusOr<uint64_t> Submit(const RequestOptions& request, RequestCallback callback);
  // Ends the request soon (its blocks are freed by the next step boundary); it finishes with
  // status Cancelled. NotFound for an id never given; OK and nothing for a finished one.
  absl::Status Cancel(uint64_t request);
  // Blocks until the request has finished and returns its result, which it hands over (a second
  // Wait is NotFound). timeout_s < 0: no limit; DeadlineExceeded when it runs out.
  absl::StatusOr<RequestResult> Wait(uint64_t request, double timeout_s = -1);
  // The result if the request has finished (handed over), nullopt-like Unavailable if not yet.
  absl::StatusOr<RequestResult> TryWait(uint64_t request);

  // Switches experts of a MoE layer off for every request from the next step on (an empty set:
  // all back on); the same checks as Session::SetDisabledExperts (lib/runtime/expert_mask.h).
  absl::Status SetDisabledExperts(int layer, absl::Span<const int32_t> experts);

  // Caller-driven engines (own_thread = false): runs one step; returns whether it did any work.
  absl::StatusOr<bool> Step();

  BatchEngineStats stats() const;
  const Engine& engine() const { return *engine_; }
  int64_t n_ctx() const { return n_ctx_; }

 private:
  struct Request;
  struct Scheduled;

  BatchEngine(std::shared_ptr<const Engine> engine, const BatchEngineOptions& options,
              int64_t n_ctx, std::unique_ptr<Backend> backend, std::unique_ptr<PagedKvCache> cache);
  absl::StatusOr<bool> StepLocked();  // step_mu_ held
  void SchedulerLoop();
  // Takes new requests and cancellations in (mu_ held by the caller: `lock`).
  void AdmitIncoming(std::unique_lock<std::mutex>& lock);
  std::vector<Scheduled> Schedule();
  bool Grow(Request& r, int64_t positions, std::vector<Scheduled>& batch);
  void Preempt(Request& r);
  int64_t running_count() const;  // admitted, neither finished nor preempted
  void ReleaseBlocks(Request& r);
  void Admit(Request& r);
  // Samples the request's next token from `logits` and tells its callback.
  void Advance(Request& r, absl::Span<const float> logits);
  void Finish(Request& r, FinishReason reason, absl::Status status = absl::OkStatus());
  // Copies the pool's block counts into stats_ (mu_ held, on the stepping thread).
  void PublishPoolLocked();

  std::shared_ptr<const Engine> engine_;
  BatchEngineOptions options_;
  int64_t n_ctx_;
  std::unique_ptr<Backend> backend_;
  Transformer transformer_;
  std::unique_ptr<PagedKvCache> cache_;
  std::unique_ptr<StepDriver> driver_;  // over ranks: whether they are still in step

  // The stepping side (step_mu_): the requests admitted, oldest first, and those waiting for
  // room, in arrival order (preempted ones back at the front).
  std::mutex step_mu_;
  std::vector<std::unique_ptr<Request>> running_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<float> logits_;
  Telemetry step_telemetry_;
  std::atomic<std::thread::id> stepping_thread_{};

  // The shared side (mu_): new requests, cancellations, finished results, statistics.
  mutable std::mutex mu_;
  std::condition_variable work_;      // something to step, or stopping
  std::condition_variable finished_;  // a request finished
  std::vector<std::unique_ptr<Request>> incoming_;
  std::vector<uint64_t> cancels_;
  // Switched-off experts ([layer][expert]), handed to the forward pass at the next step.
  std::vector<std::vector<bool>> disabled_experts_;
  bool disabled_changed_ = false;
  absl::flat_hash_map<uint64_t, RequestResult> results_;  // finished, not handed over
  absl::flat_hash_map<uint64_t, bool> live_;              // submitted, not finished: keep_result
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  BatchEngineStats stats_;
  double sum_sequences_ = 0, sum_experts_ = 0;

  std::thread scheduler_;
};

}  // namespace moe
