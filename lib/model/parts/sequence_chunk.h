// One sequence's part of a batched forward step.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "lib/kv/kv_sequence.h"
#include "lib/moe/routing_history.h"

namespace moe {

enum class LogitsFor { kLast, kAll, kNone };

// What a sequence's tokens cost, added to by each step: the weight bytes their computation
// touched (every dense matrix, the routed experts each token chose, the output head where its
// logits were computed, one embedding row) and the multiply-adds of the matrix products and of
// attention (norms, RoPE and softmax are not counted).
struct SequenceCost {
  int64_t tokens = 0;
  int64_t weight_bytes = 0;
  int64_t multiply_adds = 0;
};

// Its new tokens at positions pos0, pos0 + 1, ..., after the pos0 positions its K/V already
// holds.
struct SequenceChunk {
  absl::Span<const int32_t> tokens;
  int64_t pos0 = 0;
  KvSequence* kv = nullptr;
  LogitsFor logits = LogitsFor::kLast;
  // The sequence's routing so far, for load-aware re-weighting (RoutingPolicy::load_window);
  // null: not re-weighted.
  RoutingHistory* routing_history = nullptr;
  SequenceCost* cost = nullptr;  // added to when set
};

}  // namespace moe
