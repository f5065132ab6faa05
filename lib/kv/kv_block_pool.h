// The bookkeeping of a paged KV cache (issue 17): which of its fixed-size blocks are free, which
// hold positions of running sequences, and which full blocks a new prompt may share as its prefix.
//
// A sequence's cache is a table of blocks, each `block_size` positions. Once a block is full, the
// sequence commits it with the tokens it holds and its parent (the block before it in the table):
// a later prompt that starts with the same tokens, block for block, then reuses the committed
// blocks instead of computing them again (MatchPrefix). Blocks are shared by reference count;
// committed blocks nobody references stay cached, and are evicted least recently released first,
// only when a fresh block is needed and none is free.
//
// Blocks are matched by their exact tokens and parent, never by a hash alone, so two prefixes
// that collide cannot share positions. Evicting a block would orphan the blocks committed after
// it, so only blocks without cached children are evicted (a chain goes from its end).
//
// Not thread-safe: the scheduler that owns the pool serialises its calls. It knows nothing of the
// K and V data, which live in storage indexed by block id.
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moe {

class KvBlockPool {
 public:
  using BlockId = int32_t;
  static constexpr BlockId kNoBlock = -1;

  static absl::StatusOr<KvBlockPool> Create(int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks Allocate can hand out now: the free ones and the cached ones nobody references.
  int32_t available() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t cached() const { return static_cast<int32_t>(lru_.size()); }
  int32_t referenced() const { return n_blocks() - available(); }

  // A block for a sequence's next positions, referenced once by the caller: a free one, else the
  // least recently released cached block is evicted for it. ResourceExhausted when every block is
  // referenced (the scheduler then preempts or finishes a sequence).
  absl::StatusOr<BlockId> Allocate();

  // The committed blocks that hold `tokens`' longest prefix of whole blocks, in order, each now
  // referenced once more by the caller. Shorter than tokens.size() / block_size when the cache
  // holds less; a partial last block never matches.
  std::vector<BlockId> MatchPrefix(absl::Span<const int32_t> tokens);

  // `block`, full and referenced by the caller, holds exactly `tokens` (block_size of them) after
  // `parent` (a committed block, or kNoBlock for a sequence's first block): later prompts may
  // share it. False, and the block stays the caller's alone, when the pool already has a committed
  // block with the same parent and tokens (two sequences computed the same prefix at once) or the
  // arguments do not describe a committable block.
  bool Commit(BlockId parent, BlockId block, absl::Span<const int32_t> tokens);

  // The committed block that holds `tokens` after `parent`, unreferenced by this call; kNoBlock if
  // none.
  BlockId Lookup(BlockId parent, absl::Span<const int32_t> tokens) const;

  void Retain(BlockId block);  // one reference more (a sequence forked from another)
  // One reference fewer. An unreferenced committed block stays cached; any other becomes free.
  void Release(BlockId block);
  // Releases a sequence's table from its last block to its first, so that a cached chain is
  // evicted from its end.
  void ReleaseTable(absl::Span<const BlockId> table);

  int32_t ref_count(BlockId block) const { return blocks_[block].refs; }
  bool committed(BlockId block) const { return blocks_[block].committed; }
  // A committed block's number, never given to another commit (0: not committed): what a
  // block's other data, kept elsewhere, is filed under (KvAttachedPool), safe from the id's reuse.
  uint64_t serial(BlockId block) const { return blocks_[block].serial; }

 private:
  struct Key {
    BlockId parent = kNoBlock;
    std::vector<int32_t> tokens;
    bool operator==(const Key& o) const { return parent == o.parent && tokens == o.tokens; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.parent, k.tokens);
    }
  };
  struct Block {
    int32_t refs = 0;
    bool committed = false;
    Key key;                           // when committed
    int32_t children = 0;              // committed blocks whose parent this is
    uint64_t serial = 0;               // when committed
    std::list<BlockId>::iterator lru;  // when cached: unreferenced and committed
  };

  KvBlockPool(int32_t n_blocks, int32_t block_size);
  void Evict(BlockId block);
  void Reference(BlockId block);

  int32_t block_size_ = 0;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;
  std::list<BlockId> lru_;  // cached blocks, least recently released first
  absl::flat_hash_map<Key, BlockId> committed_;
  uint64_t next_serial_ = 1;
};

}  // namespace moe
