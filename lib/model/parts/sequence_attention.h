// The step's attention over each sequence's own cache, shared by the attention variants: every
// sequence's new K/V rows are written into its cache, then all the sequences attend in one
// backend call (Backend::AttentionBatch), so a decode step of many sequences costs one parallel
// loop per layer, not one per sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/model/parts/sequence_chunk.h"

namespace moe {

struct SequenceAttentionRows {
  const float* q;  // [n x q_row]: each token's query heads
  const float* k;  // [n x kv_row]
  const float* v;  // [n x kv_row]
  int64_t q_row;   // also the row length of out
  int64_t kv_row;
  float* out;  // [n x q_row]
};

// The batch's rows in order: sequence i's tokens follow sequence i - 1's. scratch holds the
// per-sequence calls between steps (no allocation once it has grown).
void StoreAndAttend(Backend& be, int layer, absl::Span<const SequenceChunk> batch,
                    const int32_t* positions, const SequenceAttentionRows& rows, int64_t n_heads,
                    const AttentionOptions& options,
                    std::vector<Backend::AttentionSequence>& scratch);

}  // namespace moe
