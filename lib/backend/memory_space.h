// Where buffers live: a backend's memory (device memory for a GPU backend), or the host's. The
// forward pass's activations and the KV caches are allocated from the backend that computes on
// them, so a device backend never copies them between operations.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace moe {

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  // Aligned to 64 bytes, not initialised; ResourceExhausted when there is not that much.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // Takes what Allocate gave (null: nothing).
  virtual void Free(void* p) = 0;
  // Sets `bytes` bytes at p to zero, in order with the operations queued before.
  virtual void Zero(void* p, size_t bytes) = 0;
};

// Plain host memory, for caches made without a backend (tests, tools).
MemorySpace& HostMemory();

}  // namespace moe
