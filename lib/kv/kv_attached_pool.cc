#include "lib/kv/kv_attached_pool.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<KvAttachedPool> KvAttachedPool::Create(int32_t n_blocks, absl::string_view what) {
  if (n_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV window pool needs blocks, not ", n_blocks));
  }
  return KvAttachedPool(n_blocks, what);
}

KvAttachedPool::KvAttachedPool(int32_t n_blocks, absl::string_view what)
    : blocks_(n_blocks), what_(what) {
  free_.reserve(n_blocks);
  for (BlockId b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // lowest ids first
}

absl::StatusOr<KvAttachedPool::BlockId> KvAttachedPool::Allocate() {
  BlockId b = kNoBlock;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    kept_.erase(blocks_[b].serial);
    blocks_[b] = Block();
  } else {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache full: all ", n_blocks(), " ", what_, " are in use"));
  }
  blocks_[b].refs = 1;
  return b;
}

bool KvAttachedPool::Keep(BlockId block, uint64_t serial) {
  if (block < 0 || block >= n_blocks() || serial == 0 || blocks_[block].refs == 0 ||
      blocks_[block].serial != 0 || kept_.contains(serial)) {
    return false;
  }
  blocks_[block].serial = serial;
  kept_.emplace(serial, block);
  return true;
}

KvAttachedPool::BlockId KvAttachedPool::Find(uint64_t serial) {
  auto it = kept_.find(serial);
  if (serial == 0 || it == kept_.end()) return kNoBlock;
  Block& blk = blocks_[it->second];
  if (blk.refs++ == 0) lru_.erase(blk.lru);
  return it->second;
}

void KvAttachedPool::Release(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.refs <= 0 || --blk.refs > 0) return;
  if (blk.serial != 0) {
    blk.lru = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

}  // namespace moe
