// DeepSeek's multi-head latent attention, computed the absorbed way: the cache holds per token
// only the normalised latent c (kv_lora_rank values) and the one RoPE key shared by all heads;
// each head's query is carried into the latent's space (k_b[h] q_nope, beside q_pe), attends
// over the cached rows as one shared KV head, and its weighted sum of latents is carried out by
// v_b[h]. The same scores and values as expanding K and V per head, for a fraction of the cache.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "lib/backend/backend_buffer.h"
#include "lib/model/parts/sequence_chunk.h"
#include "lib/model/parts/step_context.h"

namespace moe {

class LatentAttention {
 public:
  absl::Status Run(const StepContext& ctx, int layer, const LayerWeights& L,
                   absl::Span<const SequenceChunk> batch, int64_t n, float* x);

 private:
  BackendBuffer<float> xn_, q_low_, q_, kv_, latent_, q_abs_, att_latent_, att_, o_, gather_,
      product_;
  std::vector<Backend::AttentionSequence> attention_calls_;
};

}  // namespace moe
