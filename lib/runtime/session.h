// A Session is one conversation: a KV cache, a sampler and the generate loop. One thread at a
// time may call into a Session (concurrent calls get Aborted "busy"); Cancel() may be
// called from any thread at any time.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/runtime/engine.h"
#include "lib/sampling/sampler.h"

namespace moe {

struct SessionOptions {
  int64_t n_ctx = 0;  // 0: the model's trained context, at most 4096
  int threads = 0;    // 0: one per core
  DType kv_type = DType::kF32;
  uint64_t seed = 0;
  int64_t n_batch = 64;  // prompt tokens per forward call (a cancellation point between calls)
};

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
  kContextFull
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
};

class Session {
 public:
  // Called for each generated token with the text it completes (possibly empty while a UTF-8
  // character or a possible stop string is incomplete); return false to stop.
  using TokenCallback = std::function<bool(int32_t token, absl::string_view piece)>;

  static absl::StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<const Engine> engine,
                                                         const SessionOptions& options);

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

  void Cancel() { cancel_.store(true); }
  void Reset();
  absl::Status Truncate(int64_t n_keep);

  int64_t n_past() const { return cache_.size(); }
  int64_t n_ctx() const { return cache_.n_ctx(); }
  const std::vector<int32_t>& history() const { return history_; }
  const SessionStats& stats() const { return stats_; }
  const Engine& engine() const { return *engine_; }

 private:
  Session(std::shared_ptr<const Engine> engine, KvCache cache, const SessionOptions& options);
  absl::Status DecodeLocked(absl::Span<const int32_t> tokens, std::vector<float>* all_logits);
  absl::Status GenerateLocked(absl::Span<const int32_t> prompt, const GenerateOptions& options,
                              const TokenCallback& callback);

  // RAII guard against concurrent use from two threads.
  class Busy;

  std::shared_ptr<const Engine> engine_;
  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  Transformer transformer_;
  KvCache cache_;
  std::vector<int32_t> history_;  // every token in the cache, in order
  std::vector<float> logits_;
  std::atomic<bool> cancel_{false};
  std::atomic<bool> busy_{false};
  SessionStats stats_;
  uint64_t rng_calls_ = 0;
};

}  // namespace moe
