// LFM2's gated short convolution, a layer's part in place of attention: the normalised rows
// projected to B, C and X; B * X kept per position in the sequence's cache (a few positions, as
// a sliding window keeps them); each channel convolved causally over its last kernel-length
// positions, gated by C, projected back out and added to the residual stream.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/backend/backend_buffer.h"
#include "lib/model/parts/sequence_chunk.h"
#include "lib/model/parts/step_context.h"

namespace moe {

class ShortConvolution {
 public:
  // x: the step's n residual rows, updated in place (in the backend's memory, as is all scratch).
  absl::Status Run(const StepContext& ctx, int layer, const LayerWeights& L,
                   absl::Span<const SequenceChunk> batch, int64_t n, float* x);

 private:
  BackendBuffer<float> xn_, bcx_, y_, o_;
};

}  // namespace moe
