// One model run over the ranks of a communicator (expert parallelism, lib/dist): rank 0 drives
// and every other rank serves. The driving rank's Session announces each forward step (from which
// position, which tokens) before it runs it; a serving rank keeps a mirror of that session's KV
// cache and runs the same step, so at every MoE layer all ranks hold the same tokens and each
// computes only the experts it holds (Transformer::set_expert_parallel). Only rank 0 computes
// logits, samples and tokenizes. One order per step goes out, a few bytes per token: the traffic
// is the expert outputs the layers exchange.
//
// The ranks stay in step only while every collective succeeds: after a failed one (a rank that
// died, a timeout) the driver is broken and refuses every later step with the first error, and a
// serving rank returns that error.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/dist/communicator.h"
#include "lib/model/model.h"
#include "lib/moe/router.h"
#include "lib/runtime/engine.h"

namespace moe {

struct SessionOptions;

// Rank 0's side: what its Session sends the serving ranks.
class StepDriver {
 public:
  // comm: rank 0 of a world whose other ranks run ServeExpertParallel on the same model file.
  // With the dense weights on rank 0 only (ExpertRanks::dense_on_root_only) the others mirror no
  // session and hear of each MoE layer instead (MixtureFeedForward::ServeLayer): then the driver
  // sends no orders and only keeps the world's broken state.
  StepDriver(Communicator* comm, const Model& model, const ExpertRanks& ranks)
      : comm_(comm), model_(model), mirrored_(!ranks.dense_on_root_only()) {}

  // Every serving rank makes the session's KV cache (n_ctx already resolved) and routing policy.
  absl::Status Open(const SessionOptions& options, int64_t n_ctx);
  // The next step: each rank cuts its cache to n_keep tokens and runs `tokens` after them, with
  // the experts `disabled` ([layer][expert]; empty: none) switched off.
  absl::Status Step(int64_t n_keep, absl::Span<const int32_t> tokens,
                    const std::vector<std::vector<bool>>& disabled);
  // The session is gone: the serving ranks drop their mirror of it.
  absl::Status Close();
  // The step announced last failed here after the others may have begun it: they are no longer
  // in step with this rank.
  void Break(const absl::Status& why);
  // OK while the ranks are in step; after Break, the error every later step gets.
  const absl::Status& in_step() const { return broken_; }

 private:
  absl::Status Send(std::vector<uint8_t> order);

  Communicator* comm_;
  const Model& model_;
  bool mirrored_;
  absl::Status broken_;
  std::vector<std::vector<bool>> sent_disabled_;  // the experts the serving ranks have switched off
};

struct ServeOptions {
  int threads = 0;  // 0: one per core
  // How long to wait for rank 0's next order (it may be idle between requests) before giving up.
  std::chrono::milliseconds idle_timeout = Communicator::kWaitForever;
};

// A serving rank (rank > 0): runs rank 0's steps until rank 0 calls StopExpertParallelServers
// (then OK) or a collective fails (its error). `engine` holds this rank's experts
// (LoadOptions::expert_world) of the model rank 0 runs.
absl::Status ServeExpertParallel(std::shared_ptr<const Engine> engine, Communicator* comm,
                                 const ServeOptions& options);

// Rank 0, when it is done with the world: every serving rank's ServeExpertParallel returns OK.
// Waits at most 5 s (the serving ranks are waiting for it).
absl::Status StopExpertParallelServers(Communicator* comm);

}  // namespace moe
