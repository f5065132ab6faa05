// The pool of blocks attached to prefix blocks (window rows, convolution slots): blocks run out
// with a status, a block kept under a
// prefix block's serial is found again once given back (until it is evicted, least recently
// released first), and keeping refuses what would file one block twice.
#include "lib/kv/kv_attached_pool.h"

#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

using BlockId = KvAttachedPool::BlockId;
constexpr BlockId kNone = KvAttachedPool::kNoBlock;

KvAttachedPool Pool(int32_t blocks) {
  auto pool = KvAttachedPool::Create(blocks);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return *std::move(pool);
}

TEST(KvAttachedPoolTest, BlocksRunOutWithAStatusAndComeBack) {
  EXPECT_FALSE(KvAttachedPool::Create(0).ok());
  KvAttachedPool pool = Pool(3);
  std::vector<BlockId> held;
  for (int i = 0; i < 3; ++i) held.push_back(*pool.Allocate());
  EXPECT_EQ(pool.referenced(), 3);
  auto none = pool.Allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("sliding-window"), absl::string_view::npos);
  for (BlockId b : held) pool.Release(b);
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(pool.cached(), 0);  // none was kept: all free
}

TEST(KvAttachedPoolTest, AKeptBlockIsFoundUntilEvictedLeastRecentlyReleasedFirst) {
  KvAttachedPool pool = Pool(3);
  const BlockId a = *pool.Allocate(), b = *pool.Allocate(), c = *pool.Allocate();
  EXPECT_TRUE(pool.Keep(a, 11));
  EXPECT_TRUE(pool.Keep(b, 12));
  EXPECT_FALSE(pool.Keep(c, 11)) << "a serial files one block";
  EXPECT_FALSE(pool.Keep(a, 13)) << "a block is filed under one serial";
  EXPECT_FALSE(pool.Keep(c, 0)) << "serial 0 is no committed block";
  EXPECT_EQ(pool.Find(12), b);  // held twice now
  pool.Release(b);
  pool.Release(a);  // cached first
  pool.Release(b);  // then this one
  pool.Release(c);  // free
  EXPECT_EQ(pool.cached(), 2);
  EXPECT_EQ(pool.available(), 3);
  // A found block is the caller's again, out of the cache.
  EXPECT_EQ(pool.Find(11), a);
  EXPECT_EQ(pool.cached(), 1);
  pool.Release(a);  // now the most recently released
  // The free block goes first, then the least recently released cached one: b.
  EXPECT_EQ(*pool.Allocate(), c);
  EXPECT_EQ(*pool.Allocate(), b);
  EXPECT_EQ(pool.Find(12), kNone) << "an evicted block is found no more";
  EXPECT_EQ(pool.Find(11), a);
  EXPECT_EQ(pool.Find(99), kNone);
}

TEST(KvAttachedPoolTest, ARandomWorkloadNeverLeaksOrSharesABlockWrongly) {
  KvAttachedPool pool = Pool(16);
  std::mt19937 rng(7);
  std::vector<std::pair<BlockId, uint64_t>> held;  // block and the serial it was filed under
  std::vector<int> refs(16, 0);
  absl::flat_hash_map<uint64_t, BlockId> filed;  // what Find should answer
  std::vector<uint64_t> filed_as(16, 0);
  uint64_t next_serial = 1;
  for (int step = 0; step < 5000; ++step) {
    const int what = static_cast<int>(rng() % 3);
    if (what == 0) {
      auto b = pool.Allocate();
      if (!b.ok()) {
        EXPECT_EQ(pool.available(), 0);
        continue;
      }
      EXPECT_EQ(refs[*b], 0) << "a block handed out twice";
      ++refs[*b];
      if (filed_as[*b] != 0) filed.erase(filed_as[*b]);  // evicted
      filed_as[*b] = 0;
      const uint64_t serial = rng() % 2 ? next_serial++ : 0;
      if (serial != 0) {
        EXPECT_TRUE(pool.Keep(*b, serial));
        filed[serial] = *b;
        filed_as[*b] = serial;
      }
      held.push_back({*b, serial});
    } else if (what == 1 && !held.empty()) {
      const size_t i = rng() % held.size();
      pool.Release(held[i].first);
      --refs[held[i].first];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (next_serial > 1) {
      const uint64_t serial = 1 + rng() % (next_serial - 1);
      const BlockId b = pool.Find(serial);
      const auto it = filed.find(serial);
      ASSERT_EQ(b, it == filed.end() ? kNone : it->second) << "serial " << serial;
      if (b != kNone) {
        ++refs[b];
        held.push_back({b, serial});
      }
    }
    int referenced = 0;
    for (int r : refs) referenced += r > 0;
    ASSERT_EQ(pool.referenced(), referenced) << "step " << step;
  }
  for (auto& [b, serial] : held) pool.Release(b);
  EXPECT_EQ(pool.available(), 16);
}

}  // namespace
}  // namespace moe
