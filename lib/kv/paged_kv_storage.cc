#include "lib/kv/paged_kv_storage.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/kv/kv_type.h"

namespace moe {
namespace {

// One block of one layer's K (or V).
size_t LayerBlockBytes(const PagedKvShape& s, int64_t l) {
  return s.layer_rows(l).row_bytes() << s.block_shift;
}

absl::Status CheckShape(const PagedKvShape& s) {
  if (absl::Status st = CheckKvType(s.dtype, s.head_dim); !st.ok()) return st;
  if (s.n_layer <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0) {
    return absl::InvalidArgumentError("a paged KV cache needs layers, KV heads and a head size");
  }
  if (!s.conv_width.empty() && static_cast<int64_t>(s.conv_width.size()) != s.n_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("convolution widths for ", s.conv_width.size(), " layers of ", s.n_layer));
  }
  for (const std::vector<int64_t>* list : {&s.conv_rows, &s.state_floats}) {
    if (!list->empty() && (static_cast<int64_t>(list->size()) != s.n_layer ||
                           static_cast<int64_t>(s.conv_width.size()) != s.n_layer)) {
      return absl::InvalidArgumentError(absl::StrCat("convolution rows or states for ",
                                                     list->size(), " layers of ", s.n_layer, " (",
                                                     s.conv_width.size(), " convolution widths)"));
    }
  }
  if (s.block_shift < 0 || s.block_shift > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("block of 2^", s.block_shift, " positions: from 1 to 65536"));
  }
  return absl::OkStatus();
}

}  // namespace

size_t PagedKvStorage::BlockBytes(const PagedKvShape& s) {
  size_t bytes = 0;
  for (int64_t l = 0; l < s.n_layer; ++l) bytes += s.layer_rows(l).planes * LayerBlockBytes(s, l);
  return bytes;
}

size_t PagedKvStorage::SlotBytes(const PagedKvShape& s) {
  size_t bytes = 0;
  for (int64_t l = 0; l < s.n_layer; ++l) bytes += s.layer_rows(l).slot_bytes();
  return bytes;
}

PagedKvStorage::PagedKvStorage(const PagedKvShape& shape, int32_t n_blocks, int32_t n_slots,
                               BackendBuffer<uint8_t> m)
    : shape_(shape), n_blocks_(n_blocks), n_slots_(n_slots), memory_(std::move(m)) {
  int64_t start = 0;
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    layer_start_.push_back(start);
    start +=
        n_blocks_ * shape_.layer_rows(l).planes * static_cast<int64_t>(LayerBlockBytes(shape_, l));
  }
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    slot_start_.push_back(start);
    start += n_slots_ * static_cast<int64_t>(shape_.layer_rows(l).slot_bytes());
  }
}

absl::StatusOr<PagedKvStorage> PagedKvStorage::Create(const PagedKvShape& shape, int32_t n_blocks,
                                                      MemorySpace& memory) {
  return Create(shape, n_blocks, SlotBytes(shape) > 0 ? n_blocks : 0, memory);
}

absl::StatusOr<PagedKvStorage> PagedKvStorage::Create(const PagedKvShape& shape, int32_t n_blocks,
                                                      int32_t n_slots, MemorySpace& memory) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (n_blocks <= 0) return absl::InvalidArgumentError("a paged KV cache needs blocks");
  if (n_slots < 0 || (n_slots == 0 && SlotBytes(shape) > 0)) {
    return absl::InvalidArgumentError("a paged KV cache of convolution layers needs slots");
  }
  const size_t bytes = static_cast<size_t>(n_blocks) * BlockBytes(shape) +
                       static_cast<size_t>(n_slots) * SlotBytes(shape);
  BackendBuffer<uint8_t> rows;
  if (bytes > 0) {
    absl::StatusOr<uint8_t*> p = rows.Resize(memory, static_cast<int64_t>(bytes));
    if (!p.ok()) return p.status();
    memory.Zero(*p, bytes);
  }
  return PagedKvStorage(shape, n_blocks, n_slots, std::move(rows));
}

absl::StatusOr<PagedKvStorage> PagedKvStorage::CreateForBytes(const PagedKvShape& shape,
                                                              size_t bytes, int32_t n_slots,
                                                              MemorySpace& memory) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  const size_t block = BlockBytes(shape);
  const size_t slots = static_cast<size_t>(std::max(n_slots, 0)) * SlotBytes(shape);
  if (block == 0) {
    return absl::InvalidArgumentError("none of these layers caches anything per position");
  }
  if (bytes < slots + block) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV cache of ", bytes, " bytes holds no block: one takes ", block,
                     slots > 0 ? " after its slots' " : "", slots > 0 ? absl::StrCat(slots) : ""));
  }
  const size_t n = std::min<size_t>((bytes - slots) / block, INT32_MAX);
  return Create(shape, static_cast<int32_t>(n), n_slots, memory);
}

KvLayerView PagedKvStorage::layer(int64_t l, absl::Span<const int32_t> table,
                                  absl::Span<const int32_t> state_table) {
  const KvLayerRows rows = shape_.layer_rows(l);
  const int64_t block_bytes = static_cast<int64_t>(LayerBlockBytes(shape_, l));
  uint8_t* k = memory_.data() + layer_start_[l];
  KvLayerView v{rows.dtype,
                k,
                rows.planes == 1 ? k : k + n_blocks_ * block_bytes,
                rows.n_heads,
                rows.head_dim,
                KvPaging{table.data(), shape_.block_shift, block_bytes,
                         static_cast<int64_t>(rows.head_bytes()) << shape_.block_shift}};
  if (rows.carried) {
    v.state = memory_.data() + slot_start_[l];
    v.state_table = state_table.empty() ? table.data() : state_table.data();
    v.state_floats = rows.state_floats;
    v.conv_rows = rows.ring_rows;
    v.slot_floats = rows.slot_floats();
  }
  return v;
}

KvLayerView PagedKvSequence::layer(int64_t l) {
  if (layer_map_ == nullptr) return whole_->layer(l, blocks_, state_table_);
  const int32_t at = (*layer_map_)[l];
  return at >= 0 ? whole_->layer(at, blocks_, state_table_) : windowed_->layer(~at, window_blocks_);
}

}  // namespace moe
