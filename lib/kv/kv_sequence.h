// Where one sequence keeps its K/V, as the forward pass sees it: a view of each layer and the
// number of positions it has room for. A contiguous KvCache is one; a block table over a paged
// storage (PagedKvSequence) is another, so a batched step mixes sequences of any length.
#pragma once

#include <cstdint>

#include "lib/backend/backend.h"

namespace moe {

class KvSequence {
 public:
  virtual ~KvSequence() = default;
  virtual KvLayerView layer(int64_t l) = 0;
  // Positions [0, capacity()) have rows to write to.
  virtual int64_t capacity() const = 0;
  // The most tokens one forward step may add (a sliding-window layer's ring holds its window
  // plus one step); 0: any number.
  virtual int64_t max_step_tokens() const { return 0; }
};

}  // namespace moe
