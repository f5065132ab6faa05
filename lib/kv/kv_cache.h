// The KV cache of one sequence: for each layer, K and V rows [n_ctx x n_kv_heads x head_dim] in
// F32, F16 or Q8_0 (lib/kv/kv_type.h), contiguous per layer. The batching engine keeps its
// sequences in a paged cache instead (paged_kv_storage.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_sequence.h"

namespace moe {

class KvCache final : public KvSequence {
 public:
  // values_in_keys: no V rows are kept; the V view is the K rows (latent attention).
  static absl::StatusOr<KvCache> Create(int64_t n_layer, int64_t n_ctx, int64_t n_kv_heads,
                                        int64_t head_dim, DType dtype, bool values_in_keys = false);

  KvLayerView layer(int64_t l) override {
    uint8_t* k = k_[l].data();
    return {dtype_, k, v_.empty() ? k : v_[l].data(), n_kv_heads_, head_dim_, KvPaging{}};
  }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t capacity() const override { return n_ctx_; }
  DType dtype() const { return dtype_; }
  size_t byte_size() const;

  // Number of positions holding valid entries; the next token goes at position size().
  int64_t size() const { return size_; }
  void set_size(int64_t n) { size_ = n; }

 private:
  DType dtype_ = DType::kF32;
  int64_t n_ctx_ = 0, n_kv_heads_ = 0, head_dim_ = 0, size_ = 0;
  std::vector<std::vector<uint8_t>> k_, v_;
};

}  // namespace moe
