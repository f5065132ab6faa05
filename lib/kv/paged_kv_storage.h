// The K and V data of a paged KV cache (issue 17): for each attention layer, a pool of blocks of
// 2^block_shift positions, each position a row of n_kv_heads x head_dim in F32, F16 or Q8_0; for
// each convolution layer, a pool of slots, each one what the layer carries from a position to
// the next (its input's last rows and, for a recurrent layer, its state: kv_type.h). A
// sequence's block table (from KvBlockPool) and state table (which slot each block's positions
// run in) turn it into the KvLayerView the backend writes and attends through, so sequences of
// any length share one allocation made at creation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/backend/backend_buffer.h"
#include "lib/backend/memory_space.h"
#include "lib/kv/kv_sequence.h"
#include "lib/kv/kv_type.h"

namespace moe {

struct PagedKvShape {
  int64_t n_layer = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kF16;  // F32, F16 or Q8_0 (lib/kv/kv_type.h)
  int block_shift = 5;        // 32 positions per block
  // No separate values: V rows are the K rows (latent attention reads them from the keys).
  bool values_in_keys = false;
  // Per layer (or empty: none): > 0 for a convolution layer, the width of its rows, which it
  // carries conv_rows of in a slot, with a state of state_floats F32 values for a recurrent
  // layer; kNoKvRows for a layer that caches nothing.
  std::vector<int64_t> conv_width = {};
  std::vector<int64_t> conv_rows = {};
  std::vector<int64_t> state_floats = {};

  int64_t planes() const { return values_in_keys ? 1 : 2; }  // K and V, or K alone
  KvLayerRows layer_rows(int64_t l) const {
    return KvLayerRows::Of(conv_width, conv_rows, state_floats, l,
                           KvLayerRows::Attention(dtype, n_kv_heads, head_dim, values_in_keys));
  }
};

class PagedKvStorage {
 public:
  // The blocks and slots are zeroed, in `memory`: the backend's that computes on them. Without a
  // slot count, a shape that carries slots gets one a block (each block its own slot).
  static absl::StatusOr<PagedKvStorage> Create(const PagedKvShape& shape, int32_t n_blocks,
                                               MemorySpace& memory = HostMemory());
  static absl::StatusOr<PagedKvStorage> Create(const PagedKvShape& shape, int32_t n_blocks,
                                               int32_t n_slots, MemorySpace& memory);
  // n_slots and as many whole blocks as fit in the rest of `bytes` (at least one, or an error
  // naming the sizes).
  static absl::StatusOr<PagedKvStorage> CreateForBytes(const PagedKvShape& shape, size_t bytes,
                                                       int32_t n_slots = 0,
                                                       MemorySpace& memory = HostMemory());

  // Bytes one block takes over all layers, K and V (or K alone).
  static size_t BlockBytes(const PagedKvShape& shape);
  // Bytes one slot takes over all convolution layers (0: none carries one).
  static size_t SlotBytes(const PagedKvShape& shape);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t n_slots() const { return n_slots_; }
  int64_t block_rows() const { return int64_t{1} << shape_.block_shift; }
  const PagedKvShape& shape() const { return shape_; }
  size_t byte_size() const {
    return static_cast<size_t>(n_blocks_) * BlockBytes(shape_) +
           static_cast<size_t>(n_slots_) * SlotBytes(shape_);
  }

  // Layer l of the sequence whose positions live in `table`'s blocks and run in the slots of
  // `state_table` (a slot per block; empty: the block's own); valid while the tables' memory is.
  KvLayerView layer(int64_t l, absl::Span<const int32_t> table,
                    absl::Span<const int32_t> state_table = {});

 private:
  PagedKvStorage(const PagedKvShape& shape, int32_t n_blocks, int32_t n_slots,
                 BackendBuffer<uint8_t> m);

  PagedKvShape shape_;
  int32_t n_blocks_ = 0, n_slots_ = 0;
  BackendBuffer<uint8_t> memory_;     // [layer][K, V (unless in K)][block][row], then [layer][slot]
  std::vector<int64_t> layer_start_;  // per layer: where its rows start in memory_
  std::vector<int64_t> slot_start_;   // per layer: where its slots start in memory_
};

// One sequence's positions in a paged cache: its block table (from KvBlockPool), which the
// owner grows before a step needs the room. In a cache whose sliding-window layers keep their
// rows apart (PagedKvCache), those layers read a second table (from KvAttachedPool) of the same
// length, kNoBlock where the window has passed. The convolution layers run each block's
// positions in the slot its state table names (empty: the block's own, a standalone storage's
// layout); PagedKvCache sets it before each step.
class PagedKvSequence final : public KvSequence {
 public:
  // Every layer in `storage`.
  explicit PagedKvSequence(PagedKvStorage* storage) : whole_(storage) {}
  // Layer l in whole's layer layer_map[l] when that is >= 0, else in windowed's layer
  // ~layer_map[l]; `whole` may be null when every layer slides. The storages and the map
  // outlive the sequence.
  PagedKvSequence(PagedKvStorage* whole, PagedKvStorage* windowed,
                  const std::vector<int32_t>* layer_map)
      : whole_(whole), windowed_(windowed), layer_map_(layer_map) {}

  KvLayerView layer(int64_t l) override;
  int64_t capacity() const override {
    return static_cast<int64_t>(blocks_.size()) * (whole_ ? whole_ : windowed_)->block_rows();
  }
  std::vector<int32_t>& blocks() { return blocks_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  std::vector<int32_t>& window_blocks() { return window_blocks_; }
  const std::vector<int32_t>& window_blocks() const { return window_blocks_; }
  std::vector<int32_t>& state_table() { return state_table_; }
  const std::vector<int32_t>& state_table() const { return state_table_; }
  // Leading blocks already offered to the pool for sharing, and the committed block the last of
  // them is (its own, or an equal one committed first; kNoBlock: none) with that block's serial,
  // which tells whether it is still the same block.
  int64_t blocks_offered = 0;
  int32_t offered_tail = -1;
  uint64_t offered_tail_serial = 0;
  // PagedKvCache's slots: the one the sequence's next positions run in (-1: none yet), and per
  // block the snapshot the sequence holds of what followed its last position (-1: none).
  int32_t live_slot = -1;
  std::vector<int32_t> snapshots;
  // A block to snapshot when a step completes it: where the prefix the prompt shares with cached
  // blocks ends, beyond the last snapshot it could start from (-1: none).
  int64_t wanted_snapshot = -1;

 private:
  PagedKvStorage* whole_ = nullptr;
  PagedKvStorage* windowed_ = nullptr;
  const std::vector<int32_t>* layer_map_ = nullptr;
  std::vector<int32_t> blocks_, window_blocks_, state_table_;
};

}  // namespace moe
