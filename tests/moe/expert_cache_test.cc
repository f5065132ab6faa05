// The expert cache: an exact budget, pinning, the two eviction policies, load failures, reads on
// the I/O threads (a step waits only on the expert it needs), prefetching, and many threads'
// steps sharing one cache.
#include "lib/moe/expert_cache.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
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

// Reads of one layer wait until the test opens the gate: a slow disk, under the test's control.
struct GatedDisk {
  FakeDisk disk;
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> gated_layer{-1};
  std::atomic<int> waiting{0};
  std::atomic<std::thread::id> reader_thread{};
  std::vector<ExpertKey> reads;  // in the order they started, guarded by mu
  ExpertCache::Loader loader() {
    ExpertCache::Loader inner = disk.loader();
    return [this, inner](ExpertKey k, absl::Span<uint8_t> slot) {
      reader_thread = std::this_thread::get_id();
      {
        std::unique_lock<std::mutex> lock(mu);
        reads.push_back(k);
        if (k.layer == gated_layer.load()) {
          ++waiting;
          cv.wait(lock, [&] { return open; });
          --waiting;
        }
      }
      return inner(k, slot);
    };
  }
  std::vector<ExpertKey> Reads() {
    std::lock_guard<std::mutex> lock(mu);
    return reads;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

std::unique_ptr<ExpertCache> MakeGated(GatedDisk& gated, size_t slots, int io_threads = 2) {
  ExpertCache::Options o;
  o.budget_bytes = slots * kSlot;
  o.slot_bytes = kSlot;
  o.io_threads = io_threads;
  auto cache = ExpertCache::Create(o, gated.loader());
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

// Waits (bounded) until `done` holds; a test that would hang fails instead.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 5000 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

TEST(ExpertCacheTest, AStepWaitsOnlyForTheExpertStillBeingRead) {
  GatedDisk gated;
  auto cache = MakeGated(gated, 4);
  ASSERT_TRUE(cache->Acquire(std::vector<ExpertKey>{{0, 1}}).ok());  // resident beforehand
  gated.gated_layer = 3;
  const std::vector<ExpertKey> step = {{0, 1}, {3, 2}};
  auto pinned = cache->Request(step);  // returns while {3, 2} is still being read
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_TRUE(pinned->ready(0));
  EXPECT_TRUE(pinned->Wait(0).ok());  // does not block
  EXPECT_TRUE(Holds(pinned->bytes(0), step[0]));
  EXPECT_FALSE(pinned->ready(1));
  gated.Open();
  EXPECT_TRUE(pinned->Wait(1).ok());
  EXPECT_TRUE(Holds(pinned->bytes(1), step[1]));
  EXPECT_NE(gated.reader_thread.load(), std::this_thread::get_id());  // never the caller's
  EXPECT_EQ(cache->stats().misses, 2);
  EXPECT_EQ(cache->stats().hits, 1);
}

TEST(ExpertCacheTest, PrefetchedExpertsCountAsHitsWhenUsedAndAsWasteWhenEvictedUnused) {
  FakeDisk disk;
  auto cache = Make(disk, 4, EvictionPolicy::kLru);
  const std::vector<ExpertKey> guess = {{1, 0}, {1, 1}};
  EXPECT_EQ(cache->Prefetch(guess), 2u);
  ASSERT_TRUE(Eventually([&] { return cache->IsResident({1, 0}) && cache->IsResident({1, 1}); }));
  EXPECT_EQ(cache->Prefetch(guess), 0u);  // already there
  // A step uses one of the two.
  ASSERT_TRUE(cache->Acquire(std::vector<ExpertKey>{{1, 0}}).ok());
  ExpertCacheStats s = cache->stats();
  EXPECT_EQ(s.prefetches, 2);
  EXPECT_EQ(s.prefetch_hits, 1);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 0);
  // Four other experts fill the cache: the unused guess goes first (never touched), wasted.
  for (int e = 0; e < 3; ++e) {
    ExpertKey k{2, e};
    ASSERT_TRUE(cache->Acquire({&k, 1}).ok());
  }
  EXPECT_FALSE(cache->IsResident({1, 1}));
  EXPECT_TRUE(cache->IsResident({1, 0}));
  s = cache->stats();
  EXPECT_EQ(s.prefetch_wasted_bytes, static_cast<int64_t>(kSlot));
  EXPECT_EQ(cache->layer_stats()[1].prefetch_wasted_bytes, static_cast<int64_t>(kSlot));
  EXPECT_EQ(cache->layer_stats()[2].misses, 3);
}

TEST(ExpertCacheTest, PrefetchNeverEvictsWhatItIsToKeepOrWhatIsPinned) {
  FakeDisk disk;
  auto cache = Make(disk, 3, EvictionPolicy::kLru);
  const std::vector<ExpertKey> latest = {{0, 0}, {0, 1}};
  ASSERT_TRUE(cache->Acquire(latest).ok());
  ExpertKey held{0, 2};
  auto step = cache->Acquire({&held, 1});  // pinned while `step` lives
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(cache->Prefetch(std::vector<ExpertKey>{{0, 5}}, latest), 0u);
  EXPECT_TRUE(cache->IsResident({0, 0}) && cache->IsResident({0, 1}));
  *step = ExpertCache::Pinned();  // unpinned: now the guess may take its slot
  EXPECT_EQ(cache->Prefetch(std::vector<ExpertKey>{{0, 5}}, latest), 1u);
  EXPECT_TRUE(Eventually([&] { return cache->IsResident({0, 5}); }));
  EXPECT_FALSE(cache->IsResident({0, 2}));
}

TEST(ExpertCacheTest, AStaleGuessIsDroppedAndAWantedOneIsReadFirst) {
  GatedDisk gated;
  auto cache = MakeGated(gated, 6, /*io_threads=*/1);
  gated.gated_layer = 9;
  // The one I/O thread is stuck on a slow read; further guesses queue behind it.
  ASSERT_EQ(cache->Prefetch(std::vector<ExpertKey>{{9, 0}}), 1u);
  ASSERT_TRUE(Eventually([&] { return gated.waiting.load() == 1; }));
  ASSERT_EQ(cache->Prefetch(std::vector<ExpertKey>{{9, 1}}), 1u);
  // A newer guess replaces the one not started yet, which no step wants.
  ASSERT_EQ(cache->Prefetch(std::vector<ExpertKey>{{4, 0}, {4, 1}}), 2u);
  EXPECT_EQ(cache->stats().prefetches, 3);  // {9, 1} was never read
  // A step wants {4, 1}: read before the guess {4, 0}.
  auto step = cache->Request(std::vector<ExpertKey>{{4, 1}});
  ASSERT_TRUE(step.ok());
  gated.gated_layer = -1;
  gated.Open();
  EXPECT_TRUE(step->Wait(0).ok());
  EXPECT_TRUE(Holds(step->bytes(0), {4, 1}));
  ASSERT_TRUE(Eventually([&] { return cache->IsResident({4, 0}); }));
  EXPECT_EQ(gated.Reads(), (std::vector<ExpertKey>{{9, 0}, {4, 1}, {4, 0}}));
  EXPECT_FALSE(cache->IsResident({9, 1}));
}

TEST(ExpertCacheTest, WarmingFillsOnlyFreeSlotsAndKeepsTheHottestLongest) {
  FakeDisk disk;
  auto cache = Make(disk, 3, EvictionPolicy::kLru);
  ExpertKey held{5, 5};
  auto step = cache->Acquire({&held, 1});  // one slot in use: warming must leave it alone
  ASSERT_TRUE(step.ok());
  const std::vector<ExpertKey> hottest_first = {{0, 1}, {0, 2}, {0, 3}, {0, 4}};
  auto warmed = cache->Warm(hottest_first);
  ASSERT_TRUE(warmed.ok()) << warmed.status();
  EXPECT_EQ(*warmed, 2u);  // the two free slots
  EXPECT_TRUE(cache->IsResident({0, 1}) && cache->IsResident({0, 2}));
  EXPECT_FALSE(cache->IsResident({0, 3}));
  EXPECT_TRUE(cache->IsResident(held));
  EXPECT_EQ(cache->stats().evictions, 0);
  *step = ExpertCache::Pinned();
  // Two new experts: the step's old one goes first, then the colder of the warmed two.
  for (int e = 7; e < 9; ++e) {
    ExpertKey k{3, e};
    ASSERT_TRUE(cache->Acquire({&k, 1}).ok());
  }
  EXPECT_TRUE(cache->IsResident({0, 1}));
  EXPECT_FALSE(cache->IsResident({0, 2}));
  EXPECT_EQ(*cache->Warm(hottest_first), 0u);  // no free slot: nothing is evicted
}

TEST(ExpertCacheTest, AFailedPrefetchIsRetriedByTheStepThatNeedsIt) {
  FakeDisk disk;
  auto cache = Make(disk, 4, EvictionPolicy::kLru);
  disk.fail_layer = 1;
  EXPECT_EQ(cache->Prefetch(std::vector<ExpertKey>{{1, 3}}), 1u);
  ASSERT_TRUE(Eventually([&] { return cache->stats().load_seconds > 0; }));
  EXPECT_FALSE(cache->IsResident({1, 3}));
  disk.fail_layer = -1;
  auto step = cache->Acquire(std::vector<ExpertKey>{{1, 3}});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(Holds(step->bytes(0), {1, 3}));
  EXPECT_EQ(cache->stats().misses, 1);
}

TEST(ExpertCacheTest, AReadAheadThatFailsAfterAStepJoinedItIsReadAgainForTheStep) {
  // The first read (a guess) blocks until released, then fails; later reads succeed.
  std::atomic<int> attempts{0};
  std::atomic<bool> started{false}, release{false};
  ExpertCache::Options o;
  o.budget_bytes = 4 * kSlot;
  o.slot_bytes = kSlot;
  auto cache = ExpertCache::Create(o, [&](ExpertKey k, absl::Span<uint8_t> slot) -> absl::Status {
    if (attempts++ == 0) {
      started = true;
      while (!release) std::this_thread::yield();
      return absl::DataLossError("injected read error");
    }
    for (size_t i = 0; i < slot.size(); ++i)
      slot[i] = static_cast<uint8_t>(k.layer * 31 + k.expert + i);
    return absl::OkStatus();
  });
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ((*cache)->Prefetch(std::vector<ExpertKey>{{2, 5}}), 1u);
  ASSERT_TRUE(Eventually([&] { return started.load(); }));
  auto step = (*cache)->Request(std::vector<ExpertKey>{{2, 5}});  // joins the guess's read
  ASSERT_TRUE(step.ok()) << step.status();
  release = true;
  EXPECT_TRUE(step->Wait(0).ok());
  EXPECT_TRUE(Holds(step->bytes(0), {2, 5}));
  EXPECT_EQ(attempts.load(), 2);
}

}  // namespace
}  // namespace moe
