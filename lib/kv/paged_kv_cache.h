// The paged KV cache of the batching engine (issues 17 and 18): the rows of many sequences in
// fixed-size blocks, with full blocks shared between sequences whose prompts start alike.
//
// Layers that see the whole context keep every position, in blocks from a KvBlockPool, which
// also decides which prefixes are shared. Layers that attend over a sliding window keep their
// rows apart, in blocks from a KvAttachedPool: a sequence holds such a block only while its window
// still reaches a position in it, so those layers cost about a window per sequence rather than a
// context. The window blocks filled under a shared prefix stay cached with it; a prompt reuses
// a cached prefix only as far as the window rows its first new position reads are cached too
// (else it reuses a shorter prefix, or none).
//
// Convolution layers (short, Mamba-2's, a gated delta net's) keep no rows per position but a slot
// (kv_type.h), from a pool of twice max_sequences: each running sequence's positions run in a
// live slot of its own, and the last block a step completes (and the block where a prefix the
// prompt shares with cached blocks ends) keeps the slot it ends with as a snapshot, the sequence
// going on in a fresh one — if one is spare beyond a live slot for every sequence that may still
// need one. A committed block's snapshot is kept under its serial as a
// window block is, so a prompt that shares the prefix starts from it; a cached prefix is reused
// only as far as such a snapshot ends it. So these layers cost two of llama.cpp's per-sequence
// states a sequence, rather than a state and rows per block.
//
// Not thread-safe: the scheduler that owns it serialises its calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/kv/kv_attached_pool.h"
#include "lib/kv/kv_block_pool.h"
#include "lib/kv/paged_kv_storage.h"

namespace moe {

struct PagedKvCacheOptions {
  PagedKvShape shape;                 // n_layer: every layer of the model
  absl::Span<const int64_t> windows;  // per layer its attention window, 0: the whole context
  // The size: positions of the whole-context layers over all sequences, or the bytes of
  // everything when bytes > 0 (the window layers' share taken first).
  int64_t positions = 0;
  size_t bytes = 0;
  // What the window layers are sized for: sequences that hold a window at once, and the most
  // tokens one step adds over all of them.
  int32_t max_sequences = 1;
  int64_t max_step_tokens = 1;
  // Whether the convolution layers' slots keep snapshots at block ends, from which a prompt that
  // shares a cached prefix starts: a spare slot per sequence beside its live one. A caller that
  // never reuses prefixes turns it off and keeps one slot per sequence (half the slots' memory).
  bool state_snapshots = true;
  // Where the K/V rows live: the memory of the backend that computes on them; null: the host's.
  MemorySpace* memory = nullptr;
};

class PagedKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const PagedKvCacheOptions& options);
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  // An empty sequence of this cache; it must be Released before the cache goes.
  PagedKvSequence NewSequence();

  int32_t block_size() const { return pool_.block_size(); }
  // Blocks of whole-context positions: what bounds the sequences' lengths together.
  int32_t n_blocks() const { return pool_.n_blocks(); }
  int64_t positions() const { return int64_t{n_blocks()} * block_size(); }
  // Whether one sequence of this many positions fits the cache at all (alone in it).
  bool EverHolds(int64_t positions) const;
  int32_t blocks_in_use() const { return pool_.referenced(); }
  int32_t blocks_cached() const { return pool_.cached(); }
  // The window layers' blocks (0 when no layer slides).
  int32_t window_blocks() const { return window_pool_ ? window_pool_->n_blocks() : 0; }
  int32_t window_blocks_in_use() const { return window_pool_ ? window_pool_->referenced() : 0; }
  int32_t window_blocks_cached() const { return window_pool_ ? window_pool_->cached() : 0; }
  // The convolution layers' slots (0 when no layer carries one).
  int32_t state_slots() const { return slot_pool_ ? slot_pool_->n_blocks() : 0; }
  int32_t state_slots_in_use() const { return slot_pool_ ? slot_pool_->referenced() : 0; }
  int32_t state_slots_cached() const { return slot_pool_ ? slot_pool_->cached() : 0; }
  size_t byte_size() const;

  // Takes into the empty `seq` the cached blocks of `tokens`' longest prefix it may reuse: whole
  // blocks, fewer positions than tokens (the last token is always computed, for its logits), and
  // with the window rows the next position reads. Returns the positions reused.
  int64_t ReusePrefix(PagedKvSequence& seq, absl::Span<const int32_t> tokens);
  // Whether the pools could give `seq` what Grow(seq, from, to) takes: blocks for positions up
  // to `to`, window blocks for the first step from `from`, and a live slot.
  bool CanGrow(const PagedKvSequence& seq, int64_t from, int64_t to) const;
  // Before a step computes positions [from, to): gives back the window blocks and snapshots no
  // position from `from` on reads, takes the blocks the step writes and reads and a live slot,
  // and names the slot each block runs in. ResourceExhausted when a pool has none left (what it
  // took stays the sequence's).
  absl::Status Grow(PagedKvSequence& seq, int64_t from, int64_t to);
  // Offers the full blocks of the sequence's first `computed` positions, which hold `tokens`,
  // to later prompts.
  void Commit(PagedKvSequence& seq, absl::Span<const int32_t> tokens, int64_t computed);
  // Gives back every block of the sequence, which is then empty.
  void Release(PagedKvSequence& seq);

 private:
  PagedKvCache(KvBlockPool pool, std::optional<PagedKvStorage> whole,
               std::optional<KvAttachedPool> window_pool, std::optional<PagedKvStorage> windowed,
               std::optional<KvAttachedPool> slot_pool, std::vector<int32_t> layer_map,
               int64_t window, int64_t max_step_tokens, int32_t max_sequences);
  // The first block position `from`'s window reads (0 without window layers).
  int64_t FirstWindowBlock(int64_t from) const;
  // The slots of a step over [from, to): TakeLiveSlot gives back the snapshots before the block
  // holding position from - 1 and takes a live slot (the one part that may fail);
  // SnapshotCompletedBlocks then names the slot each block runs in.
  absl::Status TakeLiveSlot(PagedKvSequence& seq, int64_t from);
  void SnapshotCompletedBlocks(PagedKvSequence& seq, int64_t from, int64_t to);
  void ReleaseSlots(PagedKvSequence& seq);

  KvBlockPool pool_;
  std::optional<PagedKvStorage> whole_;  // none when every layer slides
  std::optional<KvAttachedPool> window_pool_;
  std::optional<PagedKvStorage> windowed_;  // with window_pool_: the window layers' rows
  std::optional<KvAttachedPool> slot_pool_;  // the convolution layers' slots, in whole_
  std::vector<int32_t> layer_map_;          // PagedKvSequence's layer map; empty: all whole
  int64_t window_ = 0;                      // the widest window
  int64_t max_step_tokens_ = 0;
  int32_t max_sequences_ = 1;
  int32_t live_slots_ = 0;  // sequences holding a live slot
};

}  // namespace moe
