// The blocks of a paged KV cache's sliding-window layers (issue 18). A sequence holds such a
// block only while its window still reaches a position in it, then gives it back, so those layers
// cost about a window per sequence instead of its whole context.
//
// A block that holds the window rows of a prefix block the KvBlockPool committed may be kept
// under that block's serial: given back, it stays cached (as the pool's committed blocks do), so
// a later prompt that shares the prefix finds the rows its first new position's window reads.
// Cached blocks are evicted least recently released first, when a block is needed and none is
// free. Not thread-safe, like KvBlockPool.
//
// PagedKvCache keeps the slots of its convolution layers in one too: the slot a sequence runs in
// and the snapshots of what followed a prefix block's last position, kept under its serial.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe {

class KvWindowPool {
 public:
  using BlockId = int32_t;
  static constexpr BlockId kNoBlock = -1;

  // `what` names the blocks in the error of a full pool.
  static absl::StatusOr<KvWindowPool> Create(
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

  KvWindowPool(int32_t n_blocks, absl::string_view what);

  std::vector<Block> blocks_;
  std::vector<BlockId> free_;
  std::list<BlockId> lru_;  // cached blocks, least recently released first
  absl::flat_hash_map<uint64_t, BlockId> kept_;
  std::string what_;
};

}  // namespace moe
