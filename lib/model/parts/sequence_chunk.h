// One sequence's part of a batched forward step.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "lib/kv/kv_sequence.h"
#include "lib/moe/routing_history.h"

namespace moe {

enum class LogitsFor { kLast, kAll, kNone };

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
};

}  // namespace moe
