// The transformer forward pass of the supported MoE architectures, written once against the
// Backend interface. A Transformer serves one caller at a time (it keeps scratch buffers).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/base/scratch_vector.h"
#include "lib/kv/kv_cache.h"
#include "lib/kv/kv_sequence.h"
#include "lib/model/model.h"
#include "lib/model/telemetry.h"
#include "lib/moe/expert_store.h"
#include "lib/moe/router.h"

namespace moe {

enum class LogitsFor { kLast, kAll, kNone };

// One sequence's part of a batched step: its new tokens at positions pos0, pos0 + 1, ..., after
// the pos0 positions its K/V already holds.
struct SequenceChunk {
  absl::Span<const int32_t> tokens;
  int64_t pos0 = 0;
  KvSequence* kv = nullptr;
  LogitsFor logits = LogitsFor::kLast;
};

class Transformer {
 public:
  Transformer(std::shared_ptr<const Model> model, Backend* backend)
      : model_(std::move(model)), backend_(backend) {}

  // Runs `tokens` at positions cache.size(), cache.size()+1, ... (one batch, causal), appends their
  // K/V to the cache, and writes logits [rows x n_vocab] for the rows `which` asks for. Telemetry,
  // when given, is added to. Errors leave the cache as it was.
  absl::Status Forward(absl::Span<const int32_t> tokens, KvCache& cache, LogitsFor which,
                       std::vector<float>* logits, Telemetry* telemetry = nullptr);

  // One step over several sequences: every matrix and every routed expert runs once over all the
  // chunks' tokens; attention reads each chunk's own K/V. Each chunk's K/V gets its tokens' rows
  // (the caller records the new sizes); logits gets the rows the chunks ask for, in chunk order
  // ([rows x n_vocab]). A token's results do not depend on what else is in the batch.
  absl::Status ForwardBatch(absl::Span<const SequenceChunk> batch, std::vector<float>* logits,
                            Telemetry* telemetry = nullptr);

  // Experts that must never be chosen (per layer x expert); empty = none.
  void set_disabled_experts(std::vector<std::vector<bool>> disabled) {
    disabled_ = std::move(disabled);
  }

  // Routed experts come from `store` (pinned per step) instead of the model's resident copies;
  // null: resident. The store outlives the Transformer.
  void set_expert_store(ExpertStore* store) { store_ = store; }
  // With an expert store: while a layer's experts run, guess the next layer's by applying its
  // router to the current hidden state (pre-gating) and start reading them. Changes no result.
  void set_expert_prefetch(bool on) { prefetch_ = on; }

  const Model& model() const { return *model_; }

 private:
  void Attention(int layer, const LayerWeights& L, absl::Span<const SequenceChunk> batch, int64_t n,
                 float* x, Telemetry* tel);
  absl::Status MoeFfn(int layer, const LayerWeights& L, int64_t n, float* x, Telemetry* tel);
  // Runs the chunk's jobs (s_.jobs, the step's experts in order, then the shared expert if
  // with_shared) as the reads finish: the resident ones first, then each group that became ready
  // while the previous one ran.
  absl::Status RunStoredExperts(const ExpertStore::Step& step, bool with_shared);
  // The experts of layer + 1 its router picks for x (pre-gating), handed to the store to read.
  void PrefetchNextLayer(int layer, int64_t n, const float* x);
  // Checks the guess PrefetchNextLayer made for this layer against what it selected.
  void ScorePrediction(int layer);

  std::shared_ptr<const Model> model_;
  Backend* backend_;
  ExpertStore* store_ = nullptr;
  bool prefetch_ = true;
  std::vector<std::vector<bool>> disabled_;

  // Activations of the current call, kept between calls so decoding allocates nothing once the
  // buffers have grown to the batch size.
  struct Scratch {
    std::vector<int32_t> positions;
    std::vector<int32_t> tokens;      // the batch's tokens, chunk after chunk
    std::vector<int64_t> logit_rows;  // the rows whose logits are asked for
    std::vector<float> x, xn, q, k, v, att, o, router_logits, shared_out, shared_gate;
    std::vector<std::vector<int32_t>> by_expert;  // each expert's tokens
    std::vector<int32_t> slot;                    // [n x k]: place in the expert's list
    std::vector<ScratchVector<float>> expert_out;
    std::vector<Backend::ExpertJob> jobs, group;
    std::vector<int> job_of_expert;
    std::vector<int32_t> selected;          // the experts this layer's step runs, in job order
    std::vector<const float*> combine_src;  // [n x terms]
    std::vector<float> combine_weight;
    Routing routing;
    // Pre-gating: the next layer's router on the current hidden state, and per layer the experts
    // guessed for it (empty: no guess).
    std::vector<float> guess_xn, guess_logits;
    std::vector<int32_t> guess_count;
    Routing guess_routing;
    std::vector<std::vector<int32_t>> guessed;
    std::vector<char> job_done;
  };
  Scratch s_;
};

}  // namespace moe
