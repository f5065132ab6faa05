// A gated delta net, a layer's part in place of attention (qwen35moe's linear attention): the
// normalised rows projected to q, k and v (one matrix), to the output gate z and to beta and
// alpha per value head; q, k and v convolved causally over the last few positions (cached per
// position, as a sliding window keeps them), then through each value head's recurrent state by
// the delta rule (kept in the sequence's cache: KvLayerView::state); the result RMS-normed per
// head, gated by silu(z), projected back out and added to the residual stream.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/backend/backend_buffer.h"
#include "lib/model/parts/sequence_chunk.h"
#include "lib/model/parts/step_context.h"

namespace moe {

class GatedDeltaNet {
 public:
  // x: the step's n residual rows, updated in place (in the backend's memory, as is all scratch).
  absl::Status Run(const StepContext& ctx, int layer, const LayerWeights& L,
                   absl::Span<const SequenceChunk> batch, int64_t n, float* x);

 private:
  BackendBuffer<float> xn_, qkv_, z_, beta_, conv_, y_, o_;  // beta_: beta and alpha
};

}  // namespace moe
