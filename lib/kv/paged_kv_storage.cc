#include "lib/kv/paged_kv_storage.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/kv/kv_type.h"

namespace moe {
namespace {

absl::Status CheckShape(const PagedKvShape& s) {
  if (absl::Status st = CheckKvType(s.dtype, s.head_dim); !st.ok()) return st;
  if (s.n_layer <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0) {
    return absl::InvalidArgumentError("a paged KV cache needs layers, KV heads and a head size");
  }
  if (s.block_shift < 0 || s.block_shift > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("block of 2^", s.block_shift, " positions: from 1 to 65536"));
  }
  return absl::OkStatus();
}

}  // namespace

size_t PagedKvStorage::BlockBytes(const PagedKvShape& s) {
  return static_cast<size_t>(s.planes() * s.n_layer * (int64_t{1} << s.block_shift)) *
         RowBytes(s.dtype, s.n_kv_heads * s.head_dim);
}

int64_t PagedKvStorage::layer_block_bytes() const {
  return static_cast<int64_t>(BlockBytes(shape_)) / (shape_.planes() * shape_.n_layer);
}

absl::StatusOr<PagedKvStorage> PagedKvStorage::Create(const PagedKvShape& shape, int32_t n_blocks,
                                                      MemorySpace& memory) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (n_blocks <= 0) return absl::InvalidArgumentError("a paged KV cache needs blocks");
  const size_t bytes = static_cast<size_t>(n_blocks) * BlockBytes(shape);
  BackendBuffer<uint8_t> rows;
  absl::StatusOr<uint8_t*> p = rows.Resize(memory, static_cast<int64_t>(bytes));
  if (!p.ok()) return p.status();
  memory.Zero(*p, bytes);
  return PagedKvStorage(shape, n_blocks, std::move(rows));
}

absl::StatusOr<PagedKvStorage> PagedKvStorage::CreateForBytes(const PagedKvShape& shape,
                                                              size_t bytes, MemorySpace& memory) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  const size_t block = BlockBytes(shape);
  if (bytes < block) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV cache of ", bytes, " bytes holds no block: one takes ", block));
  }
  const size_t n = std::min<size_t>(bytes / block, INT32_MAX);
  return Create(shape, static_cast<int32_t>(n), memory);
}

KvLayerView PagedKvStorage::layer(int64_t l, absl::Span<const int32_t> table) {
  const int64_t per_layer = shape_.planes() * n_blocks_ * layer_block_bytes();
  uint8_t* k = memory_.data() + l * per_layer;
  return {shape_.dtype,
          k,
          shape_.values_in_keys ? k : k + n_blocks_ * layer_block_bytes(),
          shape_.n_kv_heads,
          shape_.head_dim,
          KvPaging{table.data(), shape_.block_shift, layer_block_bytes()}};
}

KvLayerView PagedKvSequence::layer(int64_t l) {
  if (slot_ == nullptr) return whole_->layer(l, blocks_);
  const int32_t slot = (*slot_)[l];
  return slot >= 0 ? whole_->layer(slot, blocks_) : windowed_->layer(~slot, window_blocks_);
}

}  // namespace moe
