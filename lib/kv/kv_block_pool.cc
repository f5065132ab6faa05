#include "lib/kv/kv_block_pool.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<KvBlockPool> KvBlockPool::Create(int32_t n_blocks, int32_t block_size) {
  if (n_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a KV block pool needs blocks and positions: ", n_blocks, " blocks of ", block_size));
  }
  return KvBlockPool(n_blocks, block_size);
}

KvBlockPool::KvBlockPool(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), blocks_(n_blocks) {
  free_.reserve(n_blocks);
  // Handed out from the back: lowest ids first.
  for (BlockId b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

absl::StatusOr<KvBlockPool::BlockId> KvBlockPool::Allocate() {
  BlockId b = kNoBlock;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    // The least recently released cached block without cached children (a chain's end).
    for (BlockId candidate : lru_) {
      if (blocks_[candidate].children == 0) {
        b = candidate;
        break;
      }
    }
    if (b == kNoBlock) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "KV cache full: all ", n_blocks(), " blocks of ", block_size_, " positions are in use"));
    }
    Evict(b);
  }
  blocks_[b].refs = 1;
  return b;
}

void KvBlockPool::Evict(BlockId b) {
  Block& blk = blocks_[b];
  lru_.erase(blk.lru);
  committed_.erase(blk.key);
  if (blk.key.parent != kNoBlock) --blocks_[blk.key.parent].children;
  blk = Block();
}

void KvBlockPool::Reference(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.refs++ == 0 && blk.committed) lru_.erase(blk.lru);
}

std::vector<KvBlockPool::BlockId> KvBlockPool::MatchPrefix(absl::Span<const int32_t> tokens) {
  std::vector<BlockId> chain;
  Key key;
  for (size_t at = 0; at + block_size_ <= tokens.size(); at += block_size_) {
    key.tokens.assign(tokens.begin() + at, tokens.begin() + at + block_size_);
    auto it = committed_.find(key);
    if (it == committed_.end()) break;
    chain.push_back(it->second);
    key.parent = it->second;
  }
  for (BlockId b : chain) Reference(b);
  return chain;
}

bool KvBlockPool::Commit(BlockId parent, BlockId block, absl::Span<const int32_t> tokens) {
  if (block < 0 || block >= n_blocks() || blocks_[block].refs == 0 || blocks_[block].committed ||
      static_cast<int32_t>(tokens.size()) != block_size_) {
    return false;
  }
  if (parent != kNoBlock &&
      (parent < 0 || parent >= n_blocks() || !blocks_[parent].committed || parent == block)) {
    return false;
  }
  Key key{parent, std::vector<int32_t>(tokens.begin(), tokens.end())};
  if (committed_.contains(key)) return false;
  committed_.emplace(key, block);
  Block& blk = blocks_[block];
  blk.committed = true;
  blk.key = std::move(key);
  blk.serial = next_serial_++;
  if (parent != kNoBlock) ++blocks_[parent].children;
  return true;
}

KvBlockPool::BlockId KvBlockPool::Lookup(BlockId parent, absl::Span<const int32_t> tokens) const {
  auto it = committed_.find(Key{parent, std::vector<int32_t>(tokens.begin(), tokens.end())});
  return it == committed_.end() ? kNoBlock : it->second;
}

void KvBlockPool::Retain(BlockId b) { Reference(b); }

void KvBlockPool::Release(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.refs <= 0 || --blk.refs > 0) return;
  if (blk.committed) {
    blk.lru = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void KvBlockPool::ReleaseTable(absl::Span<const BlockId> table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) Release(*it);
}

}  // namespace moe
