// Grouped-query attention (multi-head when there are as many KV heads as heads): the layer's
// q/k/v projections with their optional biases and QK-norm, RoPE (or a NoPE layer's query
// temperature), each sequence's K/V written to and read from its own cache, the optional output
// gate (Qwen3.5's sigmoid of a second half of attn_q), the output projection added to the
// residual stream.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "lib/backend/backend_buffer.h"
#include "lib/kv/kv_sequence.h"
#include "lib/model/parts/sequence_chunk.h"
#include "lib/model/parts/step_context.h"

namespace moe {

class GroupedQueryAttention {
 public:
  // x: the step's n residual rows, updated in place (in the backend's memory, as is all scratch).
  absl::Status Run(const StepContext& ctx, int layer, const LayerWeights& L,
                   absl::Span<const SequenceChunk> batch, int64_t n, float* x);

 private:
  BackendBuffer<float> xn_, q_, k_, v_, att_, o_, q_gate_, gate_;
  std::vector<Backend::AttentionSequence> attention_calls_;
  std::vector<float> query_scales_;
};

}  // namespace moe
