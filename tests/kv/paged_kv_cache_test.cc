// The batching engine's paged cache: without sliding-window layers it is one pool as before;
// with them those layers take a smaller pool of their own, a sequence holds only the blocks its
// window reads (and every row it may read is the one written there, beside other sequences),
// and a cached prefix is reused only as far as its window rows are cached too. Convolution
// layers carry slots instead of rows: a live one per sequence, snapshots at block ends.
#include "lib/kv/paged_kv_cache.h"

#include <vector>

#include "gtest/gtest.h"
#include "lib/kv/kv_type.h"

namespace moe {
namespace {

constexpr int64_t kHeads = 2, kHeadDim = 8, kRow = kHeads * kHeadDim;

PagedKvShape Shape(int64_t n_layer, int block_shift) {
  return {n_layer, kHeads, kHeadDim, DType::kF32, block_shift};
}

std::unique_ptr<PagedKvCache> Cache(const PagedKvCacheOptions& o) {
  auto c = PagedKvCache::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

float* Row(const KvLayerView& v, bool value, int64_t p) {
  uint8_t* base = value ? v.v : v.k;
  return reinterpret_cast<float*>(base + v.paging.RowOffset(p, kRow * sizeof(float)));
}

float Mark(int s, int64_t l, bool value, int64_t p, int64_t e) {
  return static_cast<float>(s * 1000000 + l * 100000 + value * 50000 + p * 16 + e);
}

void Write(PagedKvSequence& seq, int s, int64_t n_layer, int64_t from, int64_t to) {
  for (int64_t l = 0; l < n_layer; ++l) {
    const KvLayerView v = seq.layer(l);
    for (int64_t p = from; p < to; ++p) {
      for (bool value : {false, true}) {
        for (int64_t e = 0; e < kRow; ++e) Row(v, value, p)[e] = Mark(s, l, value, p, e);
      }
    }
  }
}

// Every row a step at `to` may read: the window layers' last `window` positions, the others' all.
void ExpectReadable(PagedKvSequence& seq, int s, const std::vector<int64_t>& windows, int64_t to) {
  for (int64_t l = 0; l < std::ssize(windows); ++l) {
    const KvLayerView v = seq.layer(l);
    const int64_t first = windows[l] > 0 ? std::max<int64_t>(0, to - windows[l]) : 0;
    for (int64_t p = first; p < to; ++p) {
      for (bool value : {false, true}) {
        for (int64_t e = 0; e < kRow; ++e) {
          ASSERT_EQ(Row(v, value, p)[e], Mark(s, l, value, p, e))
              << "sequence " << s << " layer " << l << " position " << p;
        }
      }
    }
  }
}

int64_t Held(const std::vector<int32_t>& table) {
  return std::count_if(table.begin(), table.end(), [](int32_t b) { return b >= 0; });
}

TEST(PagedKvCacheTest, WithoutSlidingLayersItIsOnePool) {
  const std::vector<int64_t> windows = {0, 0};
  PagedKvCacheOptions o{Shape(2, 2), windows, /*positions=*/100};
  auto c = Cache(o);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->n_blocks(), 25);
  EXPECT_EQ(c->window_blocks(), 0);
  EXPECT_EQ(c->byte_size(), 25 * PagedKvStorage::BlockBytes(o.shape));
  o.bytes = 7 * PagedKvStorage::BlockBytes(o.shape) + 5;
  c = Cache(o);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->n_blocks(), 7);
  EXPECT_FALSE(PagedKvCache::Create({Shape(2, 2), windows, 0, 0}).ok()) << "no size";
  const std::vector<int64_t> three = {0, 0, 0};
  EXPECT_FALSE(PagedKvCache::Create({Shape(2, 2), three, 100}).ok()) << "windows per layer";
}

TEST(PagedKvCacheTest, SlidingLayersTakeASmallerPoolOfTheirOwn) {
  const std::vector<int64_t> windows = {8, 0, 8, 0};
  PagedKvCacheOptions o{Shape(4, 2),           windows, /*positions=*/1024, 0, /*max_sequences=*/2,
                        /*max_step_tokens=*/16};
  auto c = Cache(o);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->n_blocks(), 256);
  // Room for both sequences' windows (7 earlier positions: 2 blocks, and the block written) and
  // a step's 16 positions, yet far less than the whole context.
  EXPECT_GE(c->window_blocks(), 2 * 3 + 4);
  EXPECT_LT(c->window_blocks(), 256 / 4);
  const size_t half = PagedKvStorage::BlockBytes(Shape(2, 2));
  EXPECT_EQ(c->byte_size(), (256 + c->window_blocks()) * half);
  // Sized in bytes: the windows' share first, the rest whole-context blocks.
  o.bytes = c->byte_size() + half / 2;
  auto b = Cache(o);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->n_blocks(), 256);
  EXPECT_EQ(b->window_blocks(), c->window_blocks());
  o.bytes = 2 * half + 1;  // one block of each
  b = Cache(o);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->n_blocks(), 1);
  EXPECT_EQ(b->window_blocks(), 1);
  o.bytes = half;
  auto none = PagedKvCache::Create(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("holds no block"), absl::string_view::npos);
  // Every layer sliding: only window blocks hold memory.
  const std::vector<int64_t> all = {4, 4};
  auto slide = Cache({Shape(2, 2), all, 64, 0, 1, 4});
  ASSERT_NE(slide, nullptr);
  EXPECT_EQ(slide->byte_size(), slide->window_blocks() * PagedKvStorage::BlockBytes(Shape(2, 2)));
}

TEST(PagedKvCacheTest, SequencesHoldOnlyTheirWindowsAndReadWhatTheyWrote) {
  for (const std::vector<int64_t>& windows :
       {std::vector<int64_t>{8, 0, 5}, std::vector<int64_t>{3, 3}, std::vector<int64_t>{1, 0}}) {
    const int64_t n_layer = std::ssize(windows),
                  window = *std::max_element(windows.begin(), windows.end());
    auto c = Cache({Shape(n_layer, 2), windows, 512, 0, 3, 7});
    ASSERT_NE(c, nullptr);
    std::vector<PagedKvSequence> seqs;
    for (int s = 0; s < 3; ++s) seqs.push_back(c->NewSequence());
    // Three sequences in steps of 1 to 7 positions, taking blocks in turn.
    std::vector<int64_t> at(3, 0);
    for (int round = 0; round < 40; ++round) {
      for (int s = 0; s < 3; ++s) {
        const int64_t m = 1 + (round * 3 + s * 5) % 7;
        ASSERT_TRUE(c->CanGrow(seqs[s], at[s], at[s] + m));
        ASSERT_TRUE(c->Grow(seqs[s], at[s], at[s] + m).ok());
        ASSERT_GE(seqs[s].capacity(), at[s] + m);
        // The window before the step and the step itself, in blocks of 4.
        EXPECT_LE(Held(seqs[s].window_blocks()), (window - 1 + m + 3) / 4 + 1)
            << "window " << window << " at " << at[s];
        Write(seqs[s], s, n_layer, at[s], at[s] + m);
        at[s] += m;
      }
      for (int s = 0; s < 3; ++s) ExpectReadable(seqs[s], s, windows, at[s]);
    }
    for (auto& seq : seqs) c->Release(seq);
    EXPECT_EQ(c->blocks_in_use(), 0);
    EXPECT_EQ(c->window_blocks_in_use(), 0);
  }
}

// A sequence of `tokens` computed step by step (4 positions each) and offered for sharing.
void Compute(PagedKvCache& c, PagedKvSequence& seq, int s, const std::vector<int32_t>& tokens,
             const std::vector<int64_t>& windows) {
  for (int64_t at = 0; at < std::ssize(tokens); at += 4) {
    const int64_t to = std::min<int64_t>(at + 4, std::ssize(tokens));
    ASSERT_TRUE(c.Grow(seq, at, to).ok());
    Write(seq, s, std::ssize(windows), at, to);
    c.Commit(seq, tokens, to);
  }
}

TEST(PagedKvCacheTest, APrefixIsReusedOnlyAsFarAsItsWindowRowsAreCached) {
  const std::vector<int64_t> windows = {6, 0};
  auto c = Cache({Shape(2, 2), windows, 256, 0, /*max_sequences=*/1, /*max_step_tokens=*/4});
  ASSERT_NE(c, nullptr);
  const int32_t n_window = c->window_blocks();
  ASSERT_LT(n_window, 16) << "the test needs a sequence longer than the window pool";
  std::vector<int32_t> tokens(64);
  for (int i = 0; i < 64; ++i) tokens[i] = 100 + i;
  PagedKvSequence a = c->NewSequence();
  Compute(*c, a, 0, tokens, windows);
  c->Release(a);
  EXPECT_EQ(c->blocks_cached(), 16);
  EXPECT_EQ(c->window_blocks_cached(), n_window) << "the latest windows stay cached";

  // The first 48 positions, then something else: position 48 reads 43..47, still cached.
  std::vector<int32_t> late(tokens.begin(), tokens.begin() + 48);
  late.push_back(7);
  PagedKvSequence b = c->NewSequence();
  EXPECT_EQ(c->ReusePrefix(b, late), 48);
  ExpectReadable(b, 0, windows, 48);
  ASSERT_TRUE(c->Grow(b, 48, 49).ok());
  c->Release(b);

  // The first 16: the whole-context blocks are cached, but the windows of positions 16, 12, 8
  // and 4 were evicted for later ones, so nothing can be reused.
  std::vector<int32_t> early(tokens.begin(), tokens.begin() + 16);
  early.push_back(7);
  PagedKvSequence e = c->NewSequence();
  EXPECT_EQ(c->ReusePrefix(e, early), 0);
  EXPECT_TRUE(e.blocks().empty());
  EXPECT_EQ(c->blocks_in_use(), 0) << "a prefix it could not use is given back";
  EXPECT_EQ(c->window_blocks_in_use(), 0);
  // Computed again (the same rows: marks follow the tokens), the first 16 positions' window rows
  // are filed with the cached prefix; then it is reused.
  Compute(*c, e, 0, early, windows);
  c->Release(e);
  PagedKvSequence f = c->NewSequence();
  EXPECT_EQ(c->ReusePrefix(f, early), 16);
  ExpectReadable(f, 0, windows, 16);
  c->Release(f);
}

TEST(PagedKvCacheTest, AFullCacheIsAStatusAndLosesNothing) {
  const std::vector<int64_t> windows = {4, 0};
  auto c = Cache({Shape(2, 2), windows, 16, 0, 1, 4});
  ASSERT_NE(c, nullptr);
  PagedKvSequence a = c->NewSequence(), b = c->NewSequence();
  ASSERT_TRUE(c->Grow(a, 0, 12).ok());
  Write(a, 0, 2, 0, 12);
  EXPECT_FALSE(c->CanGrow(b, 0, 8));
  const absl::Status full = c->Grow(b, 0, 8);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  ExpectReadable(a, 0, windows, 12);
  c->Release(b);
  c->Release(a);
  EXPECT_EQ(c->blocks_in_use(), 0);
  EXPECT_TRUE(c->CanGrow(b, 0, 16));
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// An attention layer, a recurrent layer (3 carried rows of 6 and a state of 10) and a short
// convolution (2 rows of 8): blocks of 4 positions.
PagedKvShape ConvolutionShape() {
  PagedKvShape s = Shape(3, 2);
  s.conv_width = {0, 6, 8};
  s.conv_rows = {0, 3, 2};
  s.state_floats = {0, 10, 0};
  return s;
}

// A cache of 64 positions of that shape for max_sequences.
std::unique_ptr<PagedKvCache> ConvolutionCache(int32_t max_sequences) {
  PagedKvCacheOptions o;
  o.shape = ConvolutionShape();
  o.positions = 64;
  o.max_sequences = max_sequences;
  return Cache(o);
}

std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = i;
  return t;
}

// The convolution layers keep no rows: a slot pool of a live and a spare slot per sequence,
// whatever windows they are given, beside the attention layer's blocks.
TEST(PagedKvCacheTest, ConvolutionLayersCarrySlotsInsteadOfRows) {
  PagedKvCacheOptions o;
  o.shape = ConvolutionShape();
  const std::vector<int64_t> windows = {0, 4, 3};  // a convolution never slides
  o.windows = windows;
  o.positions = 64;
  o.max_sequences = 3;
  auto cache = Cache(o);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->window_blocks(), 0);
  EXPECT_EQ(cache->state_slots(), 6);
  EXPECT_EQ(cache->n_blocks(), 16);
  const size_t slot = (10 + 3 * 6 + 2 * 8) * sizeof(float);
  EXPECT_EQ(PagedKvStorage::SlotBytes(o.shape), slot);
  EXPECT_EQ(cache->byte_size(), 16 * 2 * 4 * kRow * sizeof(float) + 6 * slot);
  // Sized in bytes, the slots are taken first.
  o.bytes = 6 * slot + 5 * 2 * 4 * kRow * sizeof(float) + 7;
  auto sized = Cache(o);
  ASSERT_NE(sized, nullptr);
  EXPECT_EQ(sized->n_blocks(), 5);
  o.bytes = 6 * slot;
  EXPECT_FALSE(PagedKvCache::Create(o).ok());
}

// A step runs every block up to the last one it completes in the sequence's live slot, which
// that block keeps as its snapshot; a committed block's snapshot stays cached and starts a prompt
// that shares the prefix. A snapshot is taken only with a slot spare beyond a live one for every
// sequence that may still need one.
TEST(PagedKvCacheTest, SnapshotsEndCachedPrefixesAndLeaveEverySequenceALiveSlot) {
  auto cache = ConvolutionCache(2);
  ASSERT_NE(cache, nullptr);
  const std::vector<int32_t> tokens = Iota(40);
  PagedKvSequence a = cache->NewSequence();
  ASSERT_TRUE(cache->Grow(a, 0, 10).ok());  // completes blocks 0 and 1
  const std::vector<int32_t> table = a.state_table();
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0], table[1]) << "the blocks before the last completed run in its slot";
  EXPECT_NE(table[1], table[2]) << "the rest of the step runs in a fresh live slot";
  EXPECT_EQ(a.snapshots[1], table[1]);
  EXPECT_EQ(a.live_slot, table[2]);
  EXPECT_EQ(a.layer(1).state_table, a.state_table().data());
  EXPECT_EQ(cache->state_slots_in_use(), 2);
  cache->Commit(a, tokens, 10);
  ASSERT_TRUE(cache->Grow(a, 10, 11).ok());  // past block 1: its snapshot is only cached now
  EXPECT_EQ(cache->state_slots_in_use(), 1);
  EXPECT_EQ(cache->state_slots_cached(), 1);

  // A prompt sharing the first 9 tokens reuses the two committed blocks, from block 1's end.
  std::vector<int32_t> other(tokens.begin(), tokens.begin() + 9);
  other.push_back(99);
  PagedKvSequence b = cache->NewSequence();
  EXPECT_EQ(cache->ReusePrefix(b, other), 8);
  EXPECT_EQ(b.snapshots[1], table[1]);

  // Before b takes its live slot, `a` may hold at most one snapshot beside its own live slot.
  ASSERT_TRUE(cache->Grow(a, 11, 16).ok());  // completes block 3: a snapshot (3 of 4 held)
  EXPECT_NE(a.snapshots[3], KvAttachedPool::kNoBlock);
  ASSERT_TRUE(cache->Grow(a, 16, 20).ok());  // completes block 4: the last slot is b's
  EXPECT_EQ(a.snapshots[4], KvAttachedPool::kNoBlock);
  EXPECT_EQ(cache->state_slots_in_use(), 3);
  EXPECT_TRUE(cache->CanGrow(b, 8, 10));
  ASSERT_TRUE(cache->Grow(b, 8, 10).ok());
  EXPECT_EQ(b.state_table()[1], table[1]) << "the step at 8 takes the state over from it";
  EXPECT_NE(b.state_table()[2], table[1]);
  cache->Release(b);
  cache->Release(a);
  EXPECT_EQ(cache->state_slots_in_use(), 0);
}

// Where a prompt's shared prefix ends beyond the last snapshot, the prompt snapshots that block as
// it computes it, so the next prompt that shares the prefix reuses all of it.
TEST(PagedKvCacheTest, ASharedPrefixEndingPastTheLastSnapshotGetsOne) {
  auto cache = ConvolutionCache(4);
  ASSERT_NE(cache, nullptr);
  const std::vector<int32_t> first = Iota(17);
  PagedKvSequence a = cache->NewSequence();
  ASSERT_TRUE(cache->Grow(a, 0, 17).ok());  // one step: a snapshot at block 3 only
  cache->Commit(a, first, 17);
  EXPECT_EQ(a.snapshots[1], KvAttachedPool::kNoBlock);
  cache->Release(a);
  // Sharing 10 tokens, two whole blocks, but no snapshot ends block 1: nothing reused.
  std::vector<int32_t> second(first.begin(), first.begin() + 10);
  second.insert(second.end(), {90, 91, 92, 93, 94});
  PagedKvSequence b = cache->NewSequence();
  EXPECT_EQ(cache->ReusePrefix(b, second), 0);
  ASSERT_TRUE(cache->Grow(b, 0, 15).ok());  // completes blocks 0 to 2: snapshots 1 and 2
  const std::vector<int32_t> table = b.state_table();
  ASSERT_NE(b.snapshots[1], KvAttachedPool::kNoBlock);
  ASSERT_NE(b.snapshots[2], KvAttachedPool::kNoBlock);
  EXPECT_EQ(table[0], b.snapshots[1]);
  EXPECT_EQ(table[1], b.snapshots[1]);
  EXPECT_EQ(table[2], b.snapshots[2]);
  EXPECT_EQ(table[3], b.live_slot);
  EXPECT_NE(b.snapshots[1], b.snapshots[2]);
  EXPECT_NE(b.snapshots[2], b.live_slot);
  cache->Commit(b, second, 15);
  cache->Release(b);
  // A third prompt sharing those 10 tokens starts from block 1's snapshot.
  std::vector<int32_t> third(first.begin(), first.begin() + 10);
  third.insert(third.end(), {70, 71});
  PagedKvSequence c = cache->NewSequence();
  EXPECT_EQ(cache->ReusePrefix(c, third), 8);
  cache->Release(c);
}

// Without snapshots (a caller that reuses no prefix) a sequence holds its live slot alone: one
// slot per sequence, every block of a step in it, and a committed prefix is not reused past the
// convolution layers, which kept no state at its end.
TEST(PagedKvCacheTest, WithoutSnapshotsEachSequenceHasOneSlot) {
  PagedKvCacheOptions o;
  o.shape = ConvolutionShape();
  o.positions = 64;
  o.max_sequences = 3;
  o.state_snapshots = false;
  auto cache = Cache(o);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->state_slots(), 3);
  EXPECT_EQ(cache->byte_size(),
            16 * 2 * 4 * kRow * sizeof(float) + 3 * PagedKvStorage::SlotBytes(o.shape));
  const std::vector<int32_t> tokens = Iota(20);
  PagedKvSequence a = cache->NewSequence();
  ASSERT_TRUE(cache->Grow(a, 0, 10).ok());
  EXPECT_EQ(a.state_table(), std::vector<int32_t>(3, a.live_slot));
  EXPECT_EQ(cache->state_slots_in_use(), 1);
  cache->Commit(a, tokens, 10);
  cache->Release(a);
  EXPECT_EQ(cache->state_slots_in_use(), 0);
  EXPECT_EQ(cache->state_slots_cached(), 0);
  PagedKvSequence b = cache->NewSequence();
  EXPECT_EQ(cache->ReusePrefix(b, tokens), 0);
  // Every sequence still gets its live slot.
  std::vector<PagedKvSequence> running;
  for (int i = 0; i < 3; ++i) {
    running.push_back(cache->NewSequence());
    ASSERT_TRUE(cache->CanGrow(running.back(), 0, 4));
    ASSERT_TRUE(cache->Grow(running.back(), 0, 4).ok());
  }
  EXPECT_FALSE(cache->CanGrow(b, 0, 4)) << "no slot left for a fourth";
  for (PagedKvSequence& s : running) cache->Release(s);
  cache->Release(b);
  EXPECT_EQ(cache->state_slots_in_use(), 0);
}

}  // namespace
}  // namespace moe
