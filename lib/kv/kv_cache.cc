#include "lib/kv/kv_cache.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/kv/kv_type.h"

namespace moe {

absl::StatusOr<KvCache> KvCache::Create(int64_t n_layer, int64_t n_ctx, int64_t n_kv_heads,
                                        int64_t head_dim, DType dtype, bool values_in_keys) {
  if (absl::Status s = CheckKvType(dtype, head_dim); !s.ok()) return s;
  if (n_ctx <= 0 || n_ctx > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid context length ", n_ctx));
  }
  KvCache c;
  c.dtype_ = dtype;
  c.n_ctx_ = n_ctx;
  c.n_kv_heads_ = n_kv_heads;
  c.head_dim_ = head_dim;
  const size_t bytes = static_cast<size_t>(n_ctx) * RowBytes(dtype, n_kv_heads * head_dim);
  c.k_.assign(n_layer, std::vector<uint8_t>(bytes));
  if (!values_in_keys) c.v_.assign(n_layer, std::vector<uint8_t>(bytes));
  return c;
}

size_t KvCache::byte_size() const {
  size_t s = 0;
  for (const auto& k : k_) s += k.size();
  for (const auto& v : v_) s += v.size();
  return s;
}

}  // namespace moe
