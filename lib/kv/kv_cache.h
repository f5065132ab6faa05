// The KV cache of one sequence: for each layer, K and V rows [n_ctx x n_kv_heads x head_dim] in
// F32, F16 or Q8_0 (lib/kv/kv_type.h), contiguous per layer. A layer that attends over a sliding
// window keeps only a ring of rows: its window plus what one step adds, reached through a block
// table that repeats the ring's blocks over the whole context, so the attention kernels address
// it as any paged cache. The batching engine keeps its sequences in a paged cache instead
// (paged_kv_storage.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/backend/backend_buffer.h"
#include "lib/backend/memory_space.h"
#include "lib/kv/kv_sequence.h"
#include "lib/kv/kv_type.h"

namespace moe {

// Which layers may keep a ring: each layer's attention window (0: it sees the whole context) and
// the most tokens a forward step will add; max_step_tokens 0 keeps every layer whole.
struct SlidingWindows {
  absl::Span<const int64_t> window;
  int64_t max_step_tokens = 0;
};

class KvCache final : public KvSequence {
 public:
  // values_in_keys: no V rows are kept; the V view is the K rows (latent attention). The rows
  // are zeroed, in `memory`: the backend's that computes on them.
  static absl::StatusOr<KvCache> Create(int64_t n_layer, int64_t n_ctx, int64_t n_kv_heads,
                                        int64_t head_dim, DType dtype, bool values_in_keys = false,
                                        SlidingWindows sliding = {},
                                        MemorySpace& memory = HostMemory()) {
    return Create(n_layer, n_ctx, n_kv_heads, head_dim, dtype, values_in_keys, sliding, {}, {}, {},
                  memory);
  }
  // conv_width: per layer (or empty: none), > 0 for a convolution layer, which keeps no rows but
  // one slot (KvLayerRows::Convolution): a ring of its input's last conv_rows[l] F32 rows of
  // that width and, where state_floats[l] > 0 (a recurrent layer), a state of that many F32
  // values, both what follows the last position, so such a cache cannot be cut back
  // (RingsHoldWindowAt); kNoKvRows for a layer that keeps nothing (KvLayerRows::None).
  static absl::StatusOr<KvCache> Create(int64_t n_layer, int64_t n_ctx, int64_t n_kv_heads,
                                        int64_t head_dim, DType dtype, bool values_in_keys,
                                        SlidingWindows sliding,
                                        absl::Span<const int64_t> conv_width,
                                        absl::Span<const int64_t> conv_rows,
                                        absl::Span<const int64_t> state_floats,
                                        MemorySpace& memory);

  KvLayerView layer(int64_t l) override {
    uint8_t* k = k_[l].data();  // in the memory space it was made in
    const KvLayerRows& rows = rows_[l];
    // Each KV head's rows apart (KvPaging::head_stride): in each ring block, or in the whole
    // context.
    const int64_t head_bytes = static_cast<int64_t>(rows.head_bytes());
    KvPaging paging;
    paging.head_stride = n_ctx_ * head_bytes;
    if (!ring_table_[l].empty()) {
      paging = {ring_table_[l].data(), kRingBlockShift,
                static_cast<int64_t>(rows.row_bytes()) << kRingBlockShift,
                head_bytes << kRingBlockShift};
    }
    KvLayerView v{rows.dtype,    k,     rows.planes == 1 ? k : v_[l].data(), rows.n_heads,
                  rows.head_dim, paging};
    if (rows.carried) {
      // One slot, which every block of the context names.
      v.paging.block_shift = kRingBlockShift;
      v.state = state_[l].data();
      v.state_table = state_table_.data();
      v.state_floats = rows.state_floats;
      v.conv_rows = rows.ring_rows;
      v.slot_floats = rows.slot_floats();
    }
    return v;
  }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t capacity() const override { return n_ctx_; }
  int64_t max_step_tokens() const override { return max_step_tokens_; }
  // Rows layer l keeps: n_ctx, its ring's, or none (a convolution layer's slot, no layer).
  int64_t rows(int64_t l) const;
  // Whether, cut back to n positions, every ring still holds the window that position n will
  // read: writing past it may have reused those rows, and then the kept positions must be
  // computed again. Never, for n short of size(), with a recurrent layer: its state has taken
  // the later positions in.
  bool RingsHoldWindowAt(int64_t n) const;
  DType dtype() const { return dtype_; }
  size_t byte_size() const;
  // Whether a layer carries a slot (a convolution's last rows, a recurrent state), which only
  // computing the positions again, or a checkpoint, can take back to an earlier one.
  bool recurrent() const { return recurrent_; }

  // Checkpoints of a recurrent cache: copies of every carried slot at a position, with the
  // logits of the token before it, so that going back to that position or past it does not
  // compute from position 0 (a chat's reply generated again). Saving one at size() replaces the
  // oldest; `be` copies in the cache's memory space. Without carried slots, none are kept.
  static constexpr int kCheckpoints = 2;
  void SaveCheckpoint(Backend& be, absl::Span<const float> logits);
  // The latest checkpoint at a position from 1 to n copied back into the slots, size() set to
  // its position, `logits` to its logits; 0 (size() unchanged) when there is none.
  int64_t RestoreCheckpoint(Backend& be, int64_t n, std::vector<float>* logits);
  // Forgets the checkpoints past position n (the tokens after n are no longer the history).
  void DropCheckpointsAfter(int64_t n);

  // Number of positions holding valid entries; the next token goes at position size().
  int64_t size() const { return size_; }
  void set_size(int64_t n) { size_ = n; }

 private:
  static constexpr int kRingBlockShift = 4;  // rows of 16

  // Every carried layer's slot `from` into its slot `to` (0: the live one; 1..: checkpoints).
  void CopySlots(Backend& be, int64_t from, int64_t to);

  DType dtype_ = DType::kF32;
  int64_t n_ctx_ = 0, size_ = 0, max_step_tokens_ = 0;
  std::vector<KvLayerRows> rows_;              // per layer
  std::vector<BackendBuffer<uint8_t>> k_, v_;  // v_[l] empty where the layer has no V
  // Per layer: for a ring, block i of the context -> block i mod the ring's blocks; else empty.
  std::vector<std::vector<int32_t>> ring_table_;
  std::vector<int64_t> ring_window_;           // per layer: the window of a ring layer; 0 otherwise
  std::vector<BackendBuffer<uint8_t>> state_;  // per layer: a convolution layer's slot, else empty
  std::vector<int32_t> state_table_;           // every block of the context -> slot 0
  bool recurrent_ = false;
  struct Checkpoint {
    int64_t position = 0;  // 0: none
    uint64_t saved = 0;    // when, to replace the oldest
    std::vector<float> logits;
  };
  std::vector<Checkpoint> checkpoints_;  // kCheckpoints, in slots 1.. of each carried layer
  uint64_t saves_ = 0;
};

}  // namespace moe
