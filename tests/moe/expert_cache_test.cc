// The expert cache: an exact budget, pinning, the two eviction policies, load failures, and many
// threads' steps sharing one cache.
#include "lib/moe/expert_cache.h"

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr size_t kSlot = 4096;

// Fills a slot with bytes that say which expert it holds, and counts the loads.
struct FakeDisk {
  std::atomic<int> loads{0};
  std::atomic<int> fail_layer{-1};  // loads of this layer fail
  ExpertCache::Loader loader() {
    return [this](ExpertKey k, absl::Span<uint8_t> slot) -> absl::Status {
      if (k.layer == fail_layer.load()) return absl::DataLossError("injected read error");
      ++loads;
      for (size_t i = 0; i < slot.size(); ++i)
        slot[i] = static_cast<uint8_t>(k.layer * 31 + k.expert + i);
      return absl::OkStatus();
    };
  }
};

bool Holds(absl::Span<const uint8_t> bytes, ExpertKey k) {
  for (size_t i = 0; i < bytes.size(); i += 97) {
    if (bytes[i] != static_cast<uint8_t>(k.layer * 31 + k.expert + i)) return false;
  }
  return true;
}

std::unique_ptr<ExpertCache> Make(FakeDisk& disk, size_t slots, EvictionPolicy policy,
                                  size_t min_slots = 1) {
  ExpertCache::Options o;
  o.budget_bytes = slots * kSlot + kSlot / 2;  // half a slot more: must not become a slot
  o.slot_bytes = kSlot;
  o.min_slots = min_slots;
  o.policy = policy;
  auto cache = ExpertCache::Create(o, disk.loader());
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

TEST(ExpertCacheTest, TheBudgetIsExactAndTooSmallOneNamesTheMinimum) {
  FakeDisk disk;
  auto cache = Make(disk, 3, EvictionPolicy::kLru);
  EXPECT_EQ(cache->slot_count(), 3u);
  EXPECT_LE(cache->capacity_bytes(), 3 * kSlot + kSlot / 2);
  ExpertCache::Options o;
  o.budget_bytes = 3 * kSlot;
  o.slot_bytes = kSlot;
  o.min_slots = 4;  // top-4 routing
  auto small = ExpertCache::Create(o, disk.loader());
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find(std::to_string(4 * kSlot)), std::string::npos)
      << small.status();
}

TEST(ExpertCacheTest, HitsAndMissesAndTheBytesAreTheExperts) {
  FakeDisk disk;
  auto cache = Make(disk, 4, EvictionPolicy::kLru);
  const std::vector<ExpertKey> step = {{0, 1}, {0, 5}, {0, 1}};  // a duplicate shares a slot
  {
    auto pinned = cache->Acquire(step);
    ASSERT_TRUE(pinned.ok()) << pinned.status();
    ASSERT_EQ(pinned->size(), 3u);
    for (size_t i = 0; i < step.size(); ++i) EXPECT_TRUE(Holds(pinned->bytes(i), step[i]));
    EXPECT_EQ(pinned->bytes(0).data(), pinned->bytes(2).data());
  }
  auto again = cache->Acquire(step);
  ASSERT_TRUE(again.ok());
  const ExpertCacheStats s = cache->stats();
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(disk.loads.load(), 2);
  EXPECT_EQ(s.bytes_loaded, static_cast<int64_t>(2 * kSlot));
}

TEST(ExpertCacheTest, LruEvictsTheLeastRecentlyUsedAndNeverAPinnedOne) {
  FakeDisk disk;
  auto cache = Make(disk, 3, EvictionPolicy::kLru);
  auto use = [&](int32_t e) {
    const ExpertKey k{0, e};
    auto p = cache->Acquire({&k, 1});
    ASSERT_TRUE(p.ok());
  };
  use(1), use(2), use(3), use(1);  // 2 is now the least recent
  use(4);
  EXPECT_FALSE(cache->IsResident({0, 2}));
  EXPECT_TRUE(cache->IsResident({0, 1}));
  // An expert pinned by a running step is never the victim, however old.
  const ExpertKey held{0, 3};
  auto step = cache->Acquire({&held, 1});
  ASSERT_TRUE(step.ok());
  use(5), use(6), use(7);
  EXPECT_TRUE(cache->IsResident(held));
  EXPECT_TRUE(Holds(step->bytes(0), held));
}

TEST(ExpertCacheTest, LfruKeepsAFrequentExpertThatLruWouldDrop) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLfru}) {
    FakeDisk disk;
    auto cache = Make(disk, 3, policy);
    auto use = [&](int32_t e) {
      const ExpertKey k{0, e};
      ASSERT_TRUE(cache->Acquire({&k, 1}).ok());
    };
    for (int i = 0; i < 6; ++i) use(0);  // hot
    use(1), use(2);                      // 0 is now the least recent
    use(3);
    EXPECT_EQ(cache->IsResident({0, 0}), policy == EvictionPolicy::kLfru);
  }
}

TEST(ExpertCacheTest, PinnedExpertsStayAndCountAgainstTheBudget) {
  FakeDisk disk;
  auto cache = Make(disk, 3, EvictionPolicy::kLru);
  ASSERT_TRUE(cache->Pin({1, 7}).ok());
  ASSERT_TRUE(cache->Pin({1, 8}).ok());
  for (int32_t e = 0; e < 10; ++e) {
    const ExpertKey k{0, e};
    ASSERT_TRUE(cache->Acquire({&k, 1}).ok());
  }
  EXPECT_TRUE(cache->IsResident({1, 7}));
  EXPECT_TRUE(cache->IsResident({1, 8}));
  // Two experts at once cannot fit beside two pinned ones in three slots: an error, not a hang.
  const std::vector<ExpertKey> two = {{0, 1}, {0, 2}};
  auto too_many = cache->Acquire(two);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  // A step may use pinned experts: they take no second slot.
  const std::vector<ExpertKey> with_pinned = {{1, 7}, {1, 8}, {0, 1}};
  auto uses_pinned = cache->Acquire(with_pinned);
  ASSERT_TRUE(uses_pinned.ok()) << uses_pinned.status();
  EXPECT_TRUE(Holds(uses_pinned->bytes(0), with_pinned[0]));
  uses_pinned = ExpertCache::Pinned();
  cache->Unpin({1, 7});
  EXPECT_TRUE(cache->Acquire(two).ok());
}

TEST(ExpertCacheTest, ALoadErrorFailsTheStepAndLeavesTheCacheUsable) {
  FakeDisk disk;
  auto cache = Make(disk, 4, EvictionPolicy::kLru);
  disk.fail_layer = 2;
  const std::vector<ExpertKey> step = {{2, 0}, {2, 1}};
  auto failed = cache->Acquire(step);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(cache->IsResident({2, 0}));
  EXPECT_TRUE(cache->Resident().empty());
  disk.fail_layer = -1;  // the disk recovers
  auto ok = cache->Acquire(step);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(Holds(ok->bytes(1), step[1]));
}

// Threads' steps share the cache with only as many slots as one step needs: none may deadlock
// holding part of what another needs, nothing pinned may be evicted, and every byte read is the
// expert asked for.
TEST(ExpertCacheTest, ManyThreadsShareASmallCache) {
  FakeDisk disk;
  auto cache = Make(disk, 4, EvictionPolicy::kLfru, /*min_slots=*/4);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 300; ++i) {
        std::vector<ExpertKey> step;
        for (int j = 0; j < 4; ++j)
          step.push_back({static_cast<int32_t>(rng() % 2), static_cast<int32_t>(rng() % 8)});
        auto p = cache->Acquire(step);
        if (!p.ok()) {
          ++wrong;
          continue;
        }
        for (size_t j = 0; j < step.size(); ++j) wrong += !Holds(p->bytes(j), step[j]);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  const ExpertCacheStats s = cache->stats();
  EXPECT_GT(s.hits, 0);
  EXPECT_GT(s.misses, 0);
}

}  // namespace
}  // namespace moe
