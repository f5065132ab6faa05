// The paged KV cache's block bookkeeping: blocks run out with a status, committed blocks are
// shared by exact prefix (tokens and parent), cached blocks are evicted least recently released
// first and only from a chain's end, and a random workload of many sequences never leaks a block.
#include "lib/kv/kv_block_pool.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

using BlockId = KvBlockPool::BlockId;
constexpr BlockId kNone = KvBlockPool::kNoBlock;

KvBlockPool Pool(int32_t blocks, int32_t size) {
  auto pool = KvBlockPool::Create(blocks, size);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return *std::move(pool);
}

std::vector<int32_t> Iota(int32_t from, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// A sequence's whole-block prefix of `tokens`, computed (allocated and committed) after what the
// pool shares: its block table.
std::vector<BlockId> Prefill(KvBlockPool& pool, const std::vector<int32_t>& tokens) {
  const int32_t bs = pool.block_size();
  std::vector<BlockId> table = pool.MatchPrefix(tokens);
  for (size_t at = table.size() * bs; at + bs <= tokens.size(); at += bs) {
    auto b = pool.Allocate();
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(pool.Commit(table.empty() ? kNone : table.back(), *b,
                            absl::MakeConstSpan(tokens).subspan(at, bs)));
    table.push_back(*b);
  }
  return table;
}

TEST(KvBlockPoolTest, RunsOutWithAStatusAndRecoversOnRelease) {
  KvBlockPool pool = Pool(3, 4);
  std::vector<BlockId> got;
  for (int i = 0; i < 3; ++i) {
    auto b = pool.Allocate();
    ASSERT_TRUE(b.ok());
    got.push_back(*b);
  }
  EXPECT_EQ(pool.available(), 0);
  auto none = pool.Allocate();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("KV cache full"), absl::string_view::npos);
  pool.Release(got[1]);
  EXPECT_EQ(pool.available(), 1);
  auto again = pool.Allocate();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, got[1]);
  EXPECT_FALSE(KvBlockPool::Create(0, 4).ok());
  EXPECT_FALSE(KvBlockPool::Create(4, 0).ok());
}

TEST(KvBlockPoolTest, APromptSharesTheWholeBlocksOfACommittedPrefix) {
  KvBlockPool pool = Pool(8, 4);
  const std::vector<int32_t> system = Iota(100, 10);  // two whole blocks and two tokens
  std::vector<BlockId> first = Prefill(pool, system);
  ASSERT_EQ(first.size(), 2u);
  // Same first 8 tokens, then others: both blocks shared, referenced twice now.
  std::vector<int32_t> other = Iota(100, 8);
  other.push_back(7);
  EXPECT_EQ(pool.MatchPrefix(other), first);
  EXPECT_EQ(pool.ref_count(first[0]), 2);
  EXPECT_EQ(pool.ref_count(first[1]), 2);
  // A partial block never matches; different first tokens match nothing.
  EXPECT_TRUE(pool.MatchPrefix(Iota(100, 3)).empty());
  EXPECT_TRUE(pool.MatchPrefix(Iota(101, 8)).empty());
}

TEST(KvBlockPoolTest, ABlockMatchesOnlyAfterItsOwnParent) {
  KvBlockPool pool = Pool(8, 2);
  // Chains [1 2][3 4] and [9 9][3 4]: the second blocks hold the same tokens, other parents.
  std::vector<BlockId> a = Prefill(pool, {1, 2, 3, 4});
  std::vector<BlockId> b = Prefill(pool, {9, 9, 3, 4});
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NE(a[1], b[1]);
  EXPECT_EQ(pool.MatchPrefix(std::vector<int32_t>{9, 9, 3, 4}), b);
  // [3 4] alone is not a first block.
  EXPECT_TRUE(pool.MatchPrefix(std::vector<int32_t>{3, 4}).empty());
}

TEST(KvBlockPoolTest, ADuplicateCommitLeavesTheBlockPrivate) {
  KvBlockPool pool = Pool(4, 2);
  auto x = pool.Allocate(), y = pool.Allocate();
  ASSERT_TRUE(x.ok() && y.ok());
  const std::vector<int32_t> t = {5, 6};
  EXPECT_TRUE(pool.Commit(kNone, *x, t));
  EXPECT_FALSE(pool.Commit(kNone, *y, t));  // the same prefix computed twice at once
  EXPECT_FALSE(pool.committed(*y));
  EXPECT_EQ(pool.Lookup(kNone, t), *x);  // where that prefix goes on
  EXPECT_EQ(pool.Lookup(*x, t), kNone);
  EXPECT_FALSE(pool.Commit(kNone, *y, std::vector<int32_t>{5}));  // not a whole block
  EXPECT_FALSE(pool.Commit(*y, *y, t));                           // parent not committed
  pool.Release(*y);
  EXPECT_EQ(pool.cached(), 0);  // a private block goes back to the free list
  pool.Release(*x);
  EXPECT_EQ(pool.cached(), 1);  // a committed one stays for the next prompt
  EXPECT_EQ(pool.MatchPrefix(t), std::vector<BlockId>{*x});
}

TEST(KvBlockPoolTest, CachedChainsAreEvictedFromTheirEndLeastRecentFirst) {
  KvBlockPool pool = Pool(4, 2);
  std::vector<BlockId> old_chain = Prefill(pool, {1, 2, 3, 4});
  pool.ReleaseTable(old_chain);
  std::vector<BlockId> new_chain = Prefill(pool, {7, 8, 9, 10});
  pool.ReleaseTable(new_chain);
  EXPECT_EQ(pool.cached(), 4);
  EXPECT_EQ(pool.available(), 4);
  // Two fresh blocks: the old chain goes, its second block first, so nothing is orphaned.
  auto a = pool.Allocate();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, old_chain[1]);
  EXPECT_TRUE(pool.committed(old_chain[0]));  // still cached, now the end of its chain
  auto b = pool.Allocate();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, old_chain[0]);
  EXPECT_TRUE(pool.MatchPrefix(std::vector<int32_t>{1, 2, 3, 4}).empty());
  // The newer chain is still whole.
  std::vector<BlockId> still = pool.MatchPrefix(std::vector<int32_t>{7, 8, 9, 10});
  EXPECT_EQ(still, new_chain);
}

TEST(KvBlockPoolTest, ASerialNamesOneCommitOfABlockForever) {
  KvBlockPool pool = Pool(2, 2);
  std::vector<BlockId> chain = Prefill(pool, {1, 2, 3, 4});
  const uint64_t first = pool.serial(chain[0]), second = pool.serial(chain[1]);
  EXPECT_NE(first, 0u);
  EXPECT_NE(second, 0u);
  EXPECT_NE(first, second);
  pool.ReleaseTable(chain);
  auto a = pool.Allocate();  // evicts the chain's end
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, chain[1]);
  EXPECT_EQ(pool.serial(*a), 0u) << "an evicted block's serial goes with it";
  EXPECT_TRUE(pool.Commit(chain[0], *a, std::vector<int32_t>{3, 4}));  // the same prefix again
  EXPECT_GT(pool.serial(*a), second) << "a serial is never given again";
  EXPECT_EQ(pool.serial(chain[0]), first);
}

TEST(KvBlockPoolTest, ManySequencesNeverLeakABlock) {
  KvBlockPool pool = Pool(64, 4);
  std::mt19937 rng(11);
  // Prompts drawn from a few shared system prompts plus a random tail.
  const std::vector<std::vector<int32_t>> systems = {Iota(1000, 12), Iota(2000, 8), Iota(3000, 20)};
  std::vector<std::vector<BlockId>> running;
  int64_t shared = 0;
  for (int step = 0; step < 4000; ++step) {
    if (!running.empty() && (rng() % 3 == 0 || pool.available() < 8)) {
      size_t i = rng() % running.size();
      pool.ReleaseTable(running[i]);
      running.erase(running.begin() + i);
      continue;
    }
    std::vector<int32_t> prompt = systems[rng() % systems.size()];
    for (int n = rng() % 9; n > 0; --n) prompt.push_back(static_cast<int32_t>(rng() % 5));
    std::vector<BlockId> matched = pool.MatchPrefix(prompt);
    shared += static_cast<int64_t>(matched.size());
    std::vector<BlockId> table = matched;
    const int32_t bs = pool.block_size();
    bool ok = true;
    for (size_t at = table.size() * bs; at + bs <= prompt.size(); at += bs) {
      auto b = pool.Allocate();
      if (!b.ok()) {
        ok = false;
        break;
      }
      pool.Commit(table.empty() ? kNone : table.back(), *b,
                  absl::MakeConstSpan(prompt).subspan(at, bs));
      table.push_back(*b);
    }
    if (!ok) {
      pool.ReleaseTable(table);
      continue;
    }
    running.push_back(table);
    // Every block a running sequence holds is referenced; the counts add up.
    ASSERT_EQ(pool.referenced() + pool.available(), pool.n_blocks());
    for (const auto& t : running) {
      for (BlockId b : t) ASSERT_GT(pool.ref_count(b), 0);
    }
  }
  for (const auto& t : running) pool.ReleaseTable(t);
  EXPECT_EQ(pool.available(), pool.n_blocks());
  EXPECT_EQ(pool.referenced(), 0);
  EXPECT_GT(shared, 1000);  // the system prompts were shared, not recomputed
}

}  // namespace
}  // namespace moe
