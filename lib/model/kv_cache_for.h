// A contiguous KV cache shaped for a model: its KV heads and sizes, the latent layout, and the
// short-convolution layers' rows; with max_step_tokens > 0 the sliding-window and convolution
// layers keep only their window and one step (a ring), else every layer keeps every position.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "lib/backend/memory_space.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/model.h"

namespace moe {

absl::StatusOr<KvCache> KvCacheFor(const Model& model, int64_t n_ctx, DType kv_type,
                                   int64_t max_step_tokens = 0, MemorySpace& memory = HostMemory());

}  // namespace moe
