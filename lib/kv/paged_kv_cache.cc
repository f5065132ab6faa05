#include "lib/kv/paged_kv_cache.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

int64_t BlocksFor(int64_t positions, int64_t block_size) {
  return (positions + block_size - 1) / block_size;
}

absl::StatusOr<int32_t> BlockCount(int64_t n) {
  if (n <= 0) return absl::InvalidArgumentError("a paged KV cache needs blocks");
  if (n > INT32_MAX)
    return absl::InvalidArgumentError(absl::StrCat("a KV cache of ", n, " blocks"));
  return static_cast<int32_t>(n);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const PagedKvCacheOptions& o) {
  const PagedKvShape& shape = o.shape;
  MemorySpace& memory = o.memory != nullptr ? *o.memory : HostMemory();
  const int64_t bs = int64_t{1} << shape.block_shift;
  if (o.positions <= 0 && o.bytes == 0) {
    return absl::InvalidArgumentError("a paged KV cache needs a size in positions or bytes");
  }
  if (!o.windows.empty() && static_cast<int64_t>(o.windows.size()) != shape.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        o.windows.size(), " attention windows for a KV cache of ", shape.n_layer, " layers"));
  }
  // A convolution layer carries a slot instead of rows: it never slides.
  auto windowed = [&](size_t l) {
    return !o.windows.empty() && o.windows[l] > 0 && !shape.layer_rows(l).carried;
  };
  int64_t window = 0, window_layers = 0;
  for (size_t l = 0; l < o.windows.size(); ++l) {
    if (!windowed(l)) continue;
    window = std::max(window, o.windows[l]);
    ++window_layers;
  }
  // A live slot for each sequence and, with snapshots, one spare for them. Without the spare no
  // snapshot is ever taken (SnapshotCompletedBlocks keeps a live slot for every sequence), so
  // no prefix is reused past the convolution layers.
  const int32_t max_sequences = std::max(o.max_sequences, 1);
  const int64_t slots_per_sequence = o.state_snapshots ? 2 : 1;
  const int32_t n_slots =
      PagedKvStorage::SlotBytes(shape) > 0
          ? static_cast<int32_t>(std::min(slots_per_sequence * max_sequences, int64_t{INT32_MAX}))
          : 0;
  std::optional<KvAttachedPool> slot_pool;
  if (n_slots > 0) {
    MOE_ASSIGN_OR_RETURN(slot_pool,
                         KvAttachedPool::Create(n_slots, "slots of the convolution layers"));
  }
  if (window_layers == 0) {
    absl::StatusOr<PagedKvStorage> storage;
    if (o.bytes > 0) {
      storage = PagedKvStorage::CreateForBytes(shape, o.bytes, n_slots, memory);
    } else {
      MOE_ASSIGN_OR_RETURN(int32_t n, BlockCount(BlocksFor(o.positions, bs)));
      storage = PagedKvStorage::Create(shape, n, n_slots, memory);
    }
    if (!storage.ok()) return storage.status();
    MOE_ASSIGN_OR_RETURN(KvBlockPool pool, KvBlockPool::Create(storage->n_blocks(), bs));
    return std::unique_ptr<PagedKvCache>(
        new PagedKvCache(std::move(pool), *std::move(storage), std::nullopt, std::nullopt,
                         std::move(slot_pool), {}, 0, 0, max_sequences));
  }
  PagedKvShape whole_shape = shape, window_shape = shape;
  whole_shape.n_layer = shape.n_layer - window_layers;
  window_shape.n_layer = window_layers;
  for (PagedKvShape* s : {&whole_shape, &window_shape}) {
    s->conv_width.clear();
    s->conv_rows.clear();
    s->state_floats.clear();
  }
  std::vector<int32_t> layer_map;
  int32_t whole_at = 0, window_at = 0;
  for (size_t l = 0; l < o.windows.size(); ++l) {
    const bool slides = windowed(l);
    layer_map.push_back(slides ? ~window_at++ : whole_at++);
    PagedKvShape& part = slides ? window_shape : whole_shape;
    if (!shape.conv_width.empty()) part.conv_width.push_back(shape.conv_width[l]);
    if (!shape.conv_rows.empty()) part.conv_rows.push_back(shape.conv_rows[l]);
    if (!shape.state_floats.empty()) part.state_floats.push_back(shape.state_floats[l]);
  }
  // What running sequences may hold at once — each one's window before its step, rounded out
  // to blocks, plus the blocks its share of the step writes — and room to keep one window per
  // sequence cached with the prefixes it belongs to.
  const int64_t sequences = max_sequences;
  const int64_t before_step = BlocksFor(window - 1, bs);
  const int64_t wanted = sequences * (before_step + 2) + BlocksFor(o.max_step_tokens, bs) +
                         sequences * (before_step + 1);
  const size_t whole_bytes = whole_shape.n_layer > 0 ? PagedKvStorage::BlockBytes(whole_shape) : 0;
  const size_t window_bytes = PagedKvStorage::BlockBytes(window_shape);
  // The convolution layers are all whole ones: their slots are in the whole layers' storage.
  const size_t slot_bytes = n_slots * PagedKvStorage::SlotBytes(shape);
  if (o.bytes > 0 && o.bytes <= slot_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV cache of ", o.bytes, " bytes holds no block after its ", n_slots,
                     " slots of the convolution layers, which take ", slot_bytes));
  }
  const size_t bytes = o.bytes > 0 ? o.bytes - slot_bytes : 0;  // the rows'
  int64_t n_whole = 0, n_window = 0;
  if (o.bytes == 0) {
    n_whole = BlocksFor(o.positions, bs);
    n_window = std::min(wanted, n_whole);
  } else if (whole_bytes == 0) {
    // Every layer slides: the bytes are the windows'; the positions still bound the lengths.
    n_window = static_cast<int64_t>(bytes / window_bytes);
    n_whole = std::max(n_window, BlocksFor(o.positions, bs));
  } else if (static_cast<size_t>(wanted) * (whole_bytes + window_bytes) <= bytes) {
    n_window = wanted;
    n_whole = static_cast<int64_t>((bytes - wanted * window_bytes) / whole_bytes);
  } else {
    n_whole = n_window = static_cast<int64_t>(bytes / (whole_bytes + window_bytes));
  }
  if (n_whole <= 0 || n_window <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("a KV cache of ", o.bytes,
                                                   " bytes holds no block: one takes ",
                                                   whole_bytes + window_bytes));
  }
  MOE_ASSIGN_OR_RETURN(int32_t whole_blocks, BlockCount(n_whole));
  MOE_ASSIGN_OR_RETURN(int32_t window_blocks, BlockCount(n_window));
  std::optional<PagedKvStorage> whole;
  if (whole_shape.n_layer > 0) {
    MOE_ASSIGN_OR_RETURN(whole, PagedKvStorage::Create(whole_shape, whole_blocks, n_slots, memory));
  }
  MOE_ASSIGN_OR_RETURN(PagedKvStorage windowed_rows,
                       PagedKvStorage::Create(window_shape, window_blocks, memory));
  MOE_ASSIGN_OR_RETURN(KvBlockPool pool, KvBlockPool::Create(whole_blocks, bs));
  MOE_ASSIGN_OR_RETURN(KvAttachedPool window_pool, KvAttachedPool::Create(window_blocks));
  return std::unique_ptr<PagedKvCache>(new PagedKvCache(
      std::move(pool), std::move(whole), std::move(window_pool), std::move(windowed_rows),
      std::move(slot_pool), std::move(layer_map), window, o.max_step_tokens, max_sequences));
}

PagedKvCache::PagedKvCache(KvBlockPool pool, std::optional<PagedKvStorage> whole,
                           std::optional<KvAttachedPool> window_pool,
                           std::optional<PagedKvStorage> windowed,
                           std::optional<KvAttachedPool> slot_pool, std::vector<int32_t> layer_map,
                           int64_t window, int64_t max_step_tokens, int32_t max_sequences)
    : pool_(std::move(pool)),
      whole_(std::move(whole)),
      window_pool_(std::move(window_pool)),
      windowed_(std::move(windowed)),
      slot_pool_(std::move(slot_pool)),
      layer_map_(std::move(layer_map)),
      window_(window),
      max_step_tokens_(std::max<int64_t>(max_step_tokens, 1)),
      max_sequences_(max_sequences) {}

PagedKvSequence PagedKvCache::NewSequence() {
  PagedKvStorage* whole = whole_ ? &*whole_ : nullptr;
  if (!window_pool_) return PagedKvSequence(whole);
  return PagedKvSequence(whole, &*windowed_, &layer_map_);
}

size_t PagedKvCache::byte_size() const {
  return (whole_ ? whole_->byte_size() : 0) + (windowed_ ? windowed_->byte_size() : 0);
}

bool PagedKvCache::EverHolds(int64_t positions) const {
  return BlocksFor(positions, block_size()) <= n_blocks();
}

int64_t PagedKvCache::FirstWindowBlock(int64_t from) const {
  if (window_ <= 0) return 0;
  return std::max<int64_t>(0, from - window_ + 1) / block_size();
}

int64_t PagedKvCache::ReusePrefix(PagedKvSequence& seq, absl::Span<const int32_t> tokens) {
  const int64_t bs = block_size();
  std::vector<KvBlockPool::BlockId> chain = pool_.MatchPrefix(tokens);
  while (!chain.empty() && static_cast<int64_t>(chain.size()) * bs >= std::ssize(tokens)) {
    pool_.Release(chain.back());
    chain.pop_back();
  }
  const int64_t matched = std::ssize(chain);
  std::vector<KvAttachedPool::BlockId> window, snapshots;
  if (window_pool_) window.assign(chain.size(), KvAttachedPool::kNoBlock);
  if (slot_pool_) snapshots.assign(chain.size(), KvAttachedPool::kNoBlock);
  // Shorten the prefix until the window its next position reads, and the snapshot of what
  // followed its last position, are cached with it.
  while (!chain.empty() && (window_pool_ || slot_pool_)) {
    const int64_t k = std::ssize(chain);
    bool cached = true;
    for (int64_t b = FirstWindowBlock(k * bs); window_pool_ && b < k && cached; ++b) {
      window[b] = window_pool_->Find(pool_.serial(chain[b]));
      cached = window[b] != KvAttachedPool::kNoBlock;
    }
    if (cached && slot_pool_) {
      snapshots[k - 1] = slot_pool_->Find(pool_.serial(chain[k - 1]));
      cached = snapshots[k - 1] != KvAttachedPool::kNoBlock;
    }
    if (cached) break;
    for (KvAttachedPool::BlockId& w : window) {
      if (w != KvAttachedPool::kNoBlock) window_pool_->Release(w);
      w = KvAttachedPool::kNoBlock;
    }
    pool_.Release(chain.back());
    chain.pop_back();
    if (window_pool_) window.pop_back();
    if (slot_pool_) snapshots.pop_back();
  }
  seq.blocks() = std::move(chain);
  seq.window_blocks() = std::move(window);
  seq.snapshots = std::move(snapshots);
  // A prefix this prompt shares with cached blocks beyond the last snapshot ends where a later
  // prompt may share it too: the sequence snapshots that block as it computes it.
  seq.wanted_snapshot = slot_pool_ && std::ssize(seq.blocks()) < matched ? matched - 1 : -1;
  seq.blocks_offered = std::ssize(seq.blocks());
  seq.offered_tail = seq.blocks().empty() ? KvBlockPool::kNoBlock : seq.blocks().back();
  seq.offered_tail_serial = seq.blocks().empty() ? 0 : pool_.serial(seq.offered_tail);
  return seq.blocks_offered * bs;
}

bool PagedKvCache::CanGrow(const PagedKvSequence& seq, int64_t from, int64_t to) const {
  const int64_t bs = block_size();
  const int64_t held = std::ssize(seq.blocks());
  if (BlocksFor(to, bs) - held > pool_.available()) return false;
  if (slot_pool_ && seq.live_slot == KvAttachedPool::kNoBlock && slot_pool_->available() == 0) {
    return false;
  }
  if (!window_pool_) return true;
  const auto& window = seq.window_blocks();
  const int64_t first = FirstWindowBlock(from);
  const int64_t end = BlocksFor(std::min(to, from + max_step_tokens_), bs);
  int64_t needed = 0, freed = 0;
  for (int64_t b = 0; b < std::max(end, held); ++b) {
    const bool holds = b < held && window[b] != KvAttachedPool::kNoBlock;
    if (b < first) {
      freed += holds;
    } else if (b < end) {
      needed += !holds;
    }
  }
  return needed <= window_pool_->available() + freed;
}

absl::Status PagedKvCache::Grow(PagedKvSequence& seq, int64_t from, int64_t to) {
  const int64_t bs = block_size();
  auto& blocks = seq.blocks();
  auto& window = seq.window_blocks();
  const int64_t first = FirstWindowBlock(from);
  if (window_pool_) {
    for (int64_t b = 0; b < std::min(first, std::ssize(window)); ++b) {
      if (window[b] != KvAttachedPool::kNoBlock) window_pool_->Release(window[b]);
      window[b] = KvAttachedPool::kNoBlock;
    }
  }
  if (slot_pool_) MOE_RETURN_IF_ERROR(TakeLiveSlot(seq, from));
  while (std::ssize(blocks) < BlocksFor(to, bs)) {
    MOE_ASSIGN_OR_RETURN(KvBlockPool::BlockId b, pool_.Allocate());
    blocks.push_back(b);
    if (window_pool_) window.push_back(KvAttachedPool::kNoBlock);
  }
  if (window_pool_) {
    for (int64_t b = first; b < BlocksFor(to, bs); ++b) {
      if (window[b] == KvAttachedPool::kNoBlock) {
        MOE_ASSIGN_OR_RETURN(window[b], window_pool_->Allocate());
      }
    }
  }
  // Nothing fails after this: a step that is never run leaves a snapshot unused, not wrong.
  if (slot_pool_) SnapshotCompletedBlocks(seq, from, to);
  return absl::OkStatus();
}

absl::Status PagedKvCache::TakeLiveSlot(PagedKvSequence& seq, int64_t from) {
  // The step reads what followed position from - 1: the snapshot of that block, if it has one
  // (else the live slot holds it). Earlier snapshots are kept under their prefix or freed.
  const int64_t needed = from > 0 ? (from - 1) / block_size() : 0;
  for (int64_t b = 0; b < std::min(needed, std::ssize(seq.snapshots)); ++b) {
    if (seq.snapshots[b] != KvAttachedPool::kNoBlock) slot_pool_->Release(seq.snapshots[b]);
    seq.snapshots[b] = KvAttachedPool::kNoBlock;
  }
  if (seq.live_slot == KvAttachedPool::kNoBlock) {
    MOE_ASSIGN_OR_RETURN(seq.live_slot, slot_pool_->Allocate());
    ++live_slots_;
  }
  return absl::OkStatus();
}

void PagedKvCache::SnapshotCompletedBlocks(PagedKvSequence& seq, int64_t from, int64_t to) {
  const int64_t bs = block_size(), first = from / bs, last = to / bs - 1;
  auto& snapshots = seq.snapshots;
  snapshots.resize(seq.blocks().size(), KvAttachedPool::kNoBlock);
  // The blocks to end with a snapshot: where a prefix the prompt shares ends (ReusePrefix), and
  // the last one the step completes. Each runs, with the blocks of the step before it, in the
  // live slot, which it keeps; a fresh slot takes the rest (the state taken over at its first
  // position). Only with a slot spare beyond a live one for every sequence that may still need
  // one: else no snapshot, and a later prompt reuses a shorter prefix.
  int64_t ends[2] = {seq.wanted_snapshot, last};
  if (seq.wanted_snapshot <= last) seq.wanted_snapshot = -1;  // taken now, or passed
  std::vector<int32_t>& table = seq.state_table();
  table.resize(snapshots.size());
  const int32_t step_start_slot = seq.live_slot;
  int64_t b = first;
  for (int64_t end : ends) {
    if (end < b || end > last || snapshots[end] != KvAttachedPool::kNoBlock ||
        slot_pool_->available() <= max_sequences_ - live_slots_) {
      continue;
    }
    for (; b <= end; ++b) table[b] = seq.live_slot;
    snapshots[end] = seq.live_slot;
    seq.live_slot = *slot_pool_->Allocate();  // one is available
  }
  for (; b < std::ssize(table); ++b) table[b] = seq.live_slot;
  for (b = 0; b < first; ++b) {
    table[b] = snapshots[b] != KvAttachedPool::kNoBlock ? snapshots[b] : step_start_slot;
  }
}

void PagedKvCache::ReleaseSlots(PagedKvSequence& seq) {
  for (KvAttachedPool::BlockId s : seq.snapshots) {
    if (s != KvAttachedPool::kNoBlock) slot_pool_->Release(s);
  }
  if (seq.live_slot != KvAttachedPool::kNoBlock) {
    slot_pool_->Release(seq.live_slot);
    --live_slots_;
  }
  seq.snapshots.clear();
  seq.live_slot = KvAttachedPool::kNoBlock;
  seq.state_table().clear();
  seq.wanted_snapshot = -1;
}

void PagedKvCache::Commit(PagedKvSequence& seq, absl::Span<const int32_t> tokens,
                          int64_t computed) {
  const int64_t bs = block_size();
  for (; seq.blocks_offered < computed / bs; ++seq.blocks_offered) {
    const int64_t b = seq.blocks_offered;
    const KvBlockPool::BlockId block = seq.blocks()[b];
    KvBlockPool::BlockId parent = KvBlockPool::kNoBlock;
    if (b > 0) {
      // The prefix before this block must still be committed as it was when offered: a cached
      // block may have been evicted since, and its id reused for another prefix.
      if (seq.offered_tail == KvBlockPool::kNoBlock ||
          pool_.serial(seq.offered_tail) != seq.offered_tail_serial) {
        seq.offered_tail = KvBlockPool::kNoBlock;
        continue;
      }
      parent = seq.offered_tail;
    }
    const absl::Span<const int32_t> held = tokens.subspan(b * bs, bs);
    // Another sequence may have committed the same prefix first (computed beside this one, or
    // not reusable for want of its window rows): the prefix then goes on from its block.
    const KvBlockPool::BlockId committed =
        pool_.Commit(parent, block, held) ? block : pool_.Lookup(parent, held);
    seq.offered_tail = committed;
    seq.offered_tail_serial = committed == KvBlockPool::kNoBlock ? 0 : pool_.serial(committed);
    if (committed == KvBlockPool::kNoBlock) continue;
    // Each false when that prefix block's window rows or snapshot are cached already.
    if (window_pool_ && seq.window_blocks()[b] != KvAttachedPool::kNoBlock) {
      window_pool_->Keep(seq.window_blocks()[b], seq.offered_tail_serial);
    }
    if (slot_pool_ && b < std::ssize(seq.snapshots) &&
        seq.snapshots[b] != KvAttachedPool::kNoBlock) {
      slot_pool_->Keep(seq.snapshots[b], seq.offered_tail_serial);
    }
  }
}

void PagedKvCache::Release(PagedKvSequence& seq) {
  pool_.ReleaseTable(seq.blocks());
  for (KvAttachedPool::BlockId w : seq.window_blocks()) {
    if (w != KvAttachedPool::kNoBlock) window_pool_->Release(w);
  }
  if (slot_pool_) ReleaseSlots(seq);
  seq.blocks().clear();
  seq.window_blocks().clear();
  seq.blocks_offered = 0;
  seq.offered_tail = KvBlockPool::kNoBlock;
  seq.offered_tail_serial = 0;
}

}  // namespace moe
