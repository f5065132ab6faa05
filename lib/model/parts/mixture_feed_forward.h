// The mixture-of-experts feed-forward block: the router picks each token's experts, every
// chosen expert runs once over the tokens that chose it (from the model's resident weights or
// from an expert store, as they are read), and the weighted outputs plus the shared expert are
// added to the residual stream.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "lib/backend/backend_buffer.h"
#include "lib/dist/communicator.h"
#include "lib/dist/expert_ranks.h"
#include "lib/model/parts/step_context.h"
#include "lib/moe/expert_lists.h"
#include "lib/moe/expert_store.h"
#include "lib/moe/router.h"

namespace moe {

// Told each layer's routing of a step: the step's rows in order, k experts and weights per row
// (-1 and 0 where a row runs fewer), and the rows the experts take as input (the normalised
// residual stream, or its latent projection: [rows x HParams::expert_dim()]), on the thread that
// runs the step. For traces and the quantizer's calibration.
using RoutingObserver = std::function<void(int layer, int64_t rows, int k, const int32_t* experts,
                                           const float* weights, const float* inputs)>;

class MixtureFeedForward {
 public:
  absl::Status Run(const StepContext& ctx, int layer, const LayerWeights& L, int64_t n, float* x);

  // A step's start and end. With routing in place (Backend::routes_in_place) the layers' choices
  // stay in the backend during the step; FinishStep reads them back in one wait and counts them
  // into the telemetry and the rows' costs as the host path counts them as it goes.
  void BeginStep() { in_place_layers_.clear(); }
  absl::Status FinishStep(const StepContext& ctx);

  void set_routing_policy(const RoutingPolicy& policy) { policy_ = policy; }
  // Experts that must never be chosen (per layer x expert); empty = none.
  void set_disabled_experts(std::vector<std::vector<bool>> disabled) {
    disabled_ = std::move(disabled);
  }
  void set_routing_observer(RoutingObserver observer) { observer_ = std::move(observer); }
  void set_expert_store(ExpertStore* store) { store_ = store; }
  // Before a layer's dense feed-forward: with an expert store, starts reading the experts the
  // next layer's router picks for x (the residual entering the dense block), as a mixture layer
  // does for the one after it, so that the first mixture layer after the leading dense layers
  // (DeepSeek, GLM) does not wait for all of its reads.
  absl::Status PrefetchAcrossDense(const StepContext& ctx, int layer, int64_t n, const float* x);
  void set_expert_prefetch(bool on) { prefetch_ = on; }
  // Expert parallelism: this rank runs only the experts `ranks` gives it and exchanges their
  // outputs with the other ranks of `comm`, which run the same step on the same tokens; the
  // combine then sees every expert's output, in router order, as one process would. Null: every
  // expert runs here. Both outlive the block.
  void set_expert_parallel(Communicator* comm, const ExpertRanks* ranks) {
    comm_ = comm;
    ranks_ = ranks;
  }

  // With the dense weights on rank 0 alone (ExpertRanks::dense_on_root_only), rank 0's Run
  // broadcasts each MoE layer's inputs and routing as a message whose first byte is kLayerOrder;
  // another rank hands that message to ServeLayer, which runs this rank's share of the layer's
  // experts over it and sends their outputs back. `model` holds this rank's experts.
  static constexpr uint8_t kLayerOrder = 5;
  // Returns the layer served.
  absl::StatusOr<int> ServeLayer(Backend& backend, const Model& model,
                                 absl::Span<const uint8_t> message);

 private:
  RouterConfig ConfigFor(const HParams& h, const LayerWeights& L, int layer) const;
  // Whether this step's routing may stay in the backend: it routes in place and nothing here
  // needs the choices on the host before the experts run.
  bool RoutesInPlace(const StepContext& ctx) const;
  // The layer routed and run in the backend (logits and the shared gate's in its memory).
  absl::Status RunInPlace(const StepContext& ctx, int layer, const LayerWeights& L, int64_t n,
                          const float* logits, const float* gate, float* x);
  absl::Span<const Backend::ExpertMatrices> MatricesOf(int layer, const LayerWeights& L);
  // Lists each expert's tokens of routing_ (lists_) and the experts this rank runs
  // (selected_; with expert parallelism all_selected_ has every rank's).
  void Dispatch(const HParams& h, int layer, int64_t n);
  // Llama 4: each choice's input row, its token's input times its weight (weighted_in_), and
  // each expert's rows of it (weighted_rows_ from weighted_first_[e]), from routing_ and lists_.
  absl::Status WeighExpertInputs(Backend& be, const HParams& h, int64_t n);
  // Tells the backend which gate and up matrices the layer's experts pass reads for its n
  // tokens (a hint).
  void HintExperts(Backend& be, const LayerWeights& L, int64_t n);
  // Latent experts' combine: their weighted outputs summed in the latent space, projected up and
  // added to x with the shared expert's output.
  absl::Status CombineLatent(Backend& be, const LayerWeights& L, int64_t n, int64_t k,
                             const float* shared_out, float* x);
  // Runs selected_ over xn_ into expert_out_ (and the shared expert if shared_here), from the
  // resident weights or the expert store; prefetch_ctx (null: none) and x let the store guess the
  // next layer's experts. next_out counts the outputs used.
  absl::Status RunLocalExperts(Backend& be, const HParams& h, int layer, const LayerWeights& L,
                               int64_t n, bool shared_here, Telemetry* tel,
                               const StepContext* prefetch_ctx, const float* x, size_t* next_out);
  // Rank 0 with the dense weights to itself: the layer's inputs and routing to the other ranks.
  absl::Status SendLayer(Backend& be, int layer, int64_t n, int64_t d, Telemetry* tel);
  // Runs the chunk's jobs (jobs_, the step's experts in order, then the shared expert if
  // with_shared) as the reads finish: the resident ones first, then each group that became ready
  // while the previous one ran.
  absl::Status RunStoredExperts(Backend& backend, const ExpertStore::Step& step, bool with_shared);
  // Load-aware re-weighting of the step's routing (RoutingPolicy::load_window), recording each
  // token's choices in its sequence's history.
  void Reweigh(const StepContext& ctx, int layer, int64_t n, Telemetry* tel);
  // The experts of layer + 1 its router picks for x (pre-gating), handed to the store to read.
  absl::Status PrefetchNextLayer(const StepContext& ctx, int layer, int64_t n, const float* x);
  // Checks the guess PrefetchNextLayer made for this layer against what it selected.
  void ScorePrediction(int layer);
  // Expert parallelism: sends this rank's expert outputs to every rank and starts receiving
  // theirs (the sizes follow from the routing every rank computed alike); FinishExchange puts the
  // others' outputs of all_selected_ into outs (job_of_expert_ names each) and their counts into
  // the telemetry. Work between the two overlaps the transfer.
  // The rows [first, end) of the expert's tokens (lists_) `rank` runs: with replicas
  // (ExpertRanks::AddReplicas) its holders split them in holder order; none for a non-holder.
  std::pair<int64_t, int64_t> RowsOf(int layer, int expert, int rank) const;
  absl::StatusOr<std::unique_ptr<PendingGather>> StartExchange(Backend& be, int layer, int64_t d,
                                                               Telemetry* tel);
  absl::Status FinishExchange(Backend& be, PendingGather& exchange, const LayerWeights& L,
                              int layer, int64_t d, size_t next_out, Telemetry* tel);

  ExpertStore* store_ = nullptr;
  bool prefetch_ = true;
  std::vector<std::vector<bool>> disabled_;
  RoutingPolicy policy_;
  RoutingObserver observer_;

  // Kept between calls so decoding allocates nothing once the buffers have grown. Activations
  // are in the backend's memory; the router's and the shared expert gate's outputs are copied to
  // the host (n x n_expert and n values), where routing, dispatch and the expert store run.
  BackendBuffer<float> xn_, router_logits_, shared_out_, shared_gate_;
  // Latent experts: their input (xn_ projected down), their weighted sum, and it projected up.
  BackendBuffer<float> latent_in_, latent_sum_, latent_out_;
  std::vector<float> host_logits_, host_gate_;
  std::vector<float> host_xn_;  // the routing observer's and the expert ranks' copy of xn_
  ExpertLists lists_;           // each expert's tokens of routing_
  std::vector<BackendBuffer<float>> expert_out_;
  std::vector<Backend::ExpertJob> jobs_, group_;
  std::vector<int> job_of_expert_;
  std::vector<int32_t> selected_;          // the experts this layer's step runs, in job order
  std::vector<WeightView> hint_weights_;   // HintExperts' gate and up matrices
  std::vector<size_t> exchange_sizes_;     // bytes each rank sends
  Bytes exchange_out_;                     // this rank's
  Bytes layer_message_;                    // SendLayer's
  std::vector<int32_t> all_selected_;      // with expert parallelism: those of every rank
  Communicator* comm_ = nullptr;
  const ExpertRanks* ranks_ = nullptr;
  std::vector<const float*> combine_src_;  // [n x terms]
  std::vector<float> combine_weight_;
  BackendBuffer<float> weighted_in_;
  std::vector<int32_t> weighted_rows_;
  std::vector<int64_t> weighted_first_;
  std::vector<float> unit_weights_;
  Routing routing_;
  // Pre-gating: the next layer's router on the current hidden state, and per layer the experts
  // guessed for it (empty: no guess).
  BackendBuffer<float> guess_xn_, guess_logits_;
  std::vector<float> host_guess_logits_;
  std::vector<int32_t> guess_count_;
  Routing guess_routing_;
  std::vector<std::vector<int32_t>> guessed_;
  std::vector<char> job_done_;
  // Routing in place: the step's choices [layers x rows x k] and entropies [layers x rows], the
  // current layer's weights, the layers recorded; their host copies for FinishStep.
  BackendBuffer<int32_t> step_ids_;
  BackendBuffer<float> step_entropy_, step_weights_;
  std::vector<int> in_place_layers_;
  int64_t step_rows_ = 0;
  std::vector<int32_t> host_step_ids_;
  std::vector<float> host_step_entropy_;
  std::vector<int64_t> expert_rows_;
  std::vector<uint8_t> disabled_bytes_;
  std::vector<std::vector<Backend::ExpertMatrices>> layer_matrices_;
};

}  // namespace moe
