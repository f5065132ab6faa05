// A Mamba-2 mixer, a layer's part in place of attention (granitehybrid): the normalised rows
// projected to z, xBC and dt; xBC convolved causally over the last few positions (cached per
// position, as a sliding window keeps them); a selective scan through each head's recurrent state
// (kept in the sequence's cache: KvLayerView::state); the result gated by silu(z), normed per
// group, projected back out and added to the residual stream.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/backend/backend_buffer.h"
#include "lib/model/parts/sequence_chunk.h"
#include "lib/model/parts/step_context.h"

namespace moe {

class Mamba2Mixer {
 public:
  // x: the step's n residual rows, updated in place (in the backend's memory, as is all scratch).
  absl::Status Run(const StepContext& ctx, int layer, const LayerWeights& L,
                   absl::Span<const SequenceChunk> batch, int64_t n, float* x);

 private:
  BackendBuffer<float> xn_, zxbcdt_, conv_, y_, yn_, o_;
};

}  // namespace moe
