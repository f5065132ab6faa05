#include "lib/model/kv_cache_for.h"

namespace moe {

absl::StatusOr<KvCache> KvCacheFor(const Model& model, int64_t n_ctx, DType kv_type,
                                   int64_t max_step_tokens, MemorySpace& memory) {
  const HParams& h = model.hp();
  const SlidingWindows sliding{model.attention_windows(), max_step_tokens};
  return KvCache::Create(h.n_layer, n_ctx, h.n_head_kv, h.head_dim, kv_type, h.values_in_keys(),
                         sliding, model.conv_widths(), model.conv_rows(), model.state_floats(),
                         memory);
}

}  // namespace moe
