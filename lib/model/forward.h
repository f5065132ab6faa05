// The transformer forward pass, written once against the Backend interface: each layer runs the
// parts its architecture names (lib/model/arch/, lib/model/parts/). A Transformer serves one
// caller at a time (it keeps scratch buffers).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/backend/backend_buffer.h"
#include "lib/kv/kv_cache.h"
#include "lib/kv/kv_sequence.h"
#include "lib/model/model.h"
#include "lib/model/parts/dense_feed_forward.h"
#include "lib/model/parts/gated_delta_net.h"
#include "lib/model/parts/grouped_query_attention.h"
#include "lib/model/parts/latent_attention.h"
#include "lib/model/parts/mamba2_mixer.h"
#include "lib/model/parts/mixture_feed_forward.h"
#include "lib/model/parts/sequence_chunk.h"
#include "lib/model/parts/short_convolution.h"
#include "lib/model/telemetry.h"
#include "lib/moe/expert_store.h"

namespace moe {

// OutOfRange naming the first token id outside [0, n_vocab): what a forward step refuses.
absl::Status CheckTokenIds(absl::Span<const int32_t> tokens, int64_t n_vocab);

class Transformer {
 public:
  Transformer(std::shared_ptr<const Model> model, Backend* backend)
      : model_(std::move(model)), backend_(backend) {
    set_disabled_experts({});
  }

  // Runs `tokens` at positions cache.size(), cache.size()+1, ... (one batch, causal), appends their
  // K/V to the cache, and writes logits [rows x n_vocab] for the rows `which` asks for. Telemetry,
  // when given, is added to. Errors leave the cache as it was.
  absl::Status Forward(absl::Span<const int32_t> tokens, KvCache& cache, LogitsFor which,
                       std::vector<float>* logits, Telemetry* telemetry = nullptr,
                       RoutingHistory* routing_history = nullptr);

  // One step over several sequences: every matrix and every routed expert runs once over all the
  // chunks' tokens; attention reads each chunk's own K/V. Each chunk's K/V gets its tokens' rows
  // (the caller records the new sizes); logits gets the rows the chunks ask for, in chunk order
  // ([rows x n_vocab]). A token's results do not depend on what else is in the batch.
  absl::Status ForwardBatch(absl::Span<const SequenceChunk> batch, std::vector<float>* logits,
                            Telemetry* telemetry = nullptr);

  void set_routing_policy(const RoutingPolicy& policy) { mixture_.set_routing_policy(policy); }
  // Told every layer's routing of every step (see RoutingObserver); null: nothing is told.
  void set_routing_observer(RoutingObserver observer) {
    mixture_.set_routing_observer(std::move(observer));
  }
  // Experts that must never be chosen (per layer x expert; an empty layer: none), besides those
  // pruned from the model, which never are.
  void set_disabled_experts(std::vector<std::vector<bool>> disabled);

  // Routed experts come from `store` (pinned per step) instead of the model's resident copies;
  // null: resident. The store outlives the Transformer.
  void set_expert_store(ExpertStore* store) { mixture_.set_expert_store(store); }
  // With an expert store: while a layer's experts run, guess the next layer's by applying its
  // router to the current hidden state (pre-gating) and start reading them. Changes no result.
  void set_expert_prefetch(bool on) { mixture_.set_expert_prefetch(on); }
  // Expert parallelism over the ranks of `comm` (MixtureFeedForward::set_expert_parallel): every
  // rank runs the same steps on the same tokens, each its own experts. Null: all here.
  void set_expert_parallel(Communicator* comm, const ExpertRanks* ranks) {
    mixture_.set_expert_parallel(comm, ranks);
  }

  // Asked between layers: true ends the step with Cancelled, the caches' sizes as they were (a
  // cancellation point inside a long step; null: none).
  void set_cancel_check(std::function<bool()> check) { cancel_check_ = std::move(check); }

  const Model& model() const { return *model_; }

 private:
  std::shared_ptr<const Model> model_;
  Backend* backend_;
  // The parts, each with its own scratch kept between calls so decoding allocates nothing once
  // the buffers have grown to the batch size.
  GroupedQueryAttention attention_;
  LatentAttention latent_attention_;
  ShortConvolution short_conv_;
  Mamba2Mixer mamba2_;
  GatedDeltaNet gated_delta_net_;
  DenseFeedForward dense_;
  MixtureFeedForward mixture_;
  std::vector<int32_t> positions_;
  std::vector<RoutingHistory*> histories_;  // per token, when a chunk has a routing history
  std::function<bool()> cancel_check_;
  // Adds each chunk's tokens' cost (SequenceCost) to the chunk and the telemetry.
  void AddCosts(absl::Span<const SequenceChunk> batch, Telemetry* tel);
  std::vector<int64_t> row_expert_bytes_, row_expert_macs_;  // per row of the step
  int64_t dense_macs_per_token_ = -1;                        // computed at the first step
  int64_t dense_bytes_per_token_ = 0;
  std::vector<int32_t> tokens_;      // the batch's tokens, chunk after chunk
  std::vector<int64_t> logit_rows_;  // the rows whose logits are asked for
  // In the backend's memory: the residual stream, the normalised rows of the head, its logits.
  BackendBuffer<float> x_, xn_, logits_;
};

}  // namespace moe
