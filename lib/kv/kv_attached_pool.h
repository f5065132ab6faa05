// Blocks attached to a paged KV cache's prefix blocks: reference-counted, and, when one holds
// what belongs with a prefix block the KvBlockPool committed, kept under that block's serial, so
// that given back it stays cached (as the pool's committed blocks do) and a later prompt that
// shares the prefix finds it. Cached blocks are evicted least recently released first, when a
// block is needed and none is free. Not thread-safe, like KvBlockPool.
//
// PagedKvCache keeps two kinds in such pools (issues 17 and 18): the blocks of its sliding-window
// layers — a sequence holds one only while its window still reaches a position in it, and a kept
// one holds the window rows a prompt's first new position reads — and the slots of its
// convolution layers — the slot a sequence runs in, and snapshots of what followed a prefix
// block's last position.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe {

class KvAttachedPool {
 public:
  using BlockId = int32_t;
  static constexpr BlockId kNoBlock = -1;

  // `what` names the blocks in the error of a full pool.
  static absl::StatusOr<KvAttachedPool> Create(
      int32_t n_blocks, absl::string_view what = "blocks of the sliding-window layers");

  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks Allocate can hand out now: the free ones and the cached ones.
  int32_t available() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t cached() const { return static_cast<int32_t>(lru_.size()); }
  int32_t referenced() const { return n_blocks() - available(); }

  // A block referenced once by the caller: a free one, else the least recently released cached
  // one. ResourceExhausted when every block is referenced.
  absl::StatusOr<BlockId> Allocate();
  // `block`, referenced by the caller, holds the window rows of the prefix block `serial`
  // (KvBlockPool::serial): later prompts may Find it. False, and nothing changes, when a block is
  // kept under that serial already, `block` is kept under another, or serial is 0.
  bool Keep(BlockId block, uint64_t serial);
  // The block kept under `serial`, now referenced once more by the caller; kNoBlock if none.
  BlockId Find(uint64_t serial);
  // One reference fewer. An unreferenced kept block stays cached; any other becomes free.
  void Release(BlockId block);

 private:
  struct Block {
    int32_t refs = 0;
    uint64_t serial = 0;               // when kept
    std::list<BlockId>::iterator lru;  // when cached: unreferenced and kept
  };

  KvAttachedPool(int32_t n_blocks, absl::string_view what);

  std::vector<Block> blocks_;
  std::vector<BlockId> free_;
  std::list<BlockId> lru_;  // cached blocks, least recently released first
  absl::flat_hash_map<uint64_t, BlockId> kept_;
  std::string what_;
};

}  // namespace moe
