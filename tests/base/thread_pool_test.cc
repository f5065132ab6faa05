#include "lib/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#ifdef __linux__
#include <sched.h>
#endif

namespace moe {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 3; ++rep) {
        pool.ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 3) << "threads " << threads;
    }
  }
}

struct Chunk {
  int thread;
  int64_t b, e;
};

// Runs a loop of n items on pool, recording each chunk with the thread that ran it, in the
// order they started.
std::vector<Chunk> RecordChunks(ThreadPool& pool, int64_t n, int64_t min_piece = 0) {
  std::mutex mu;
  std::vector<Chunk> chunks;
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lock(mu);
        chunks.push_back({ThreadPool::CurrentThreadIndex(), b, e});
      },
      min_piece);
  return chunks;
}

// Thread i owns items [n i / T, n (i + 1) / T): it takes them from the front, in order, each
// piece starting where its previous one ended; what the other threads take of it they take from
// the back, so their pieces tile the end of the share. Every chunk lies within one share and
// together they cover the loop once.
TEST(ThreadPoolTest, EachThreadTakesItsShareFromTheFrontAndTheOthersFromTheBack) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 20; ++rep) {
      const int64_t n = 10007;
      const std::vector<Chunk> chunks = RecordChunks(pool, n);
      std::vector<int64_t> front(threads);
      std::vector<std::vector<std::pair<int64_t, int64_t>>> taken(threads);
      for (int i = 0; i < threads; ++i) front[i] = n * i / threads;
      for (const Chunk& c : chunks) {
        ASSERT_LT(c.b, c.e);
        int share = 0;
        while (c.b >= n * (share + 1) / threads) ++share;
        ASSERT_LE(c.e, n * (share + 1) / threads) << "a chunk spans two shares";
        if (c.thread == share) {  // one thread's chunks are recorded in the order it ran them
          EXPECT_EQ(c.b, front[share]) << threads << " threads: the owner goes on in order";
          front[share] = c.e;
        } else {
          taken[share].push_back({c.b, c.e});
        }
      }
      for (int i = 0; i < threads; ++i) {
        std::sort(taken[i].rbegin(), taken[i].rend());
        int64_t back = n * (i + 1) / threads;
        for (auto [b, e] : taken[i]) {
          EXPECT_EQ(e, back) << threads << " threads: others take share " << i << " from the back";
          back = b;
        }
        EXPECT_EQ(front[i], back) << "share " << i << " is covered once";
      }
    }
  }
}

// A worker that stalls in its first piece keeps only that piece: the caller, done with its own
// share, takes the rest of the worker's from the back.
TEST(ThreadPoolTest, AStalledThreadsShareIsTakenByTheOthers) {
  ThreadPool pool(2);
  pool.ParallelFor(2, [](int64_t, int64_t) {});  // the worker is up and waiting for work
  std::atomic<int64_t> by_caller{0};
  std::atomic<bool> stalled{false};
  pool.ParallelFor(64, [&](int64_t b, int64_t e) {
    if (ThreadPool::CurrentThreadIndex() == 0) {
      by_caller += e - b;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } else if (!stalled.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  ASSERT_TRUE(stalled.load()) << "the worker took no piece while the caller slept";
  // The worker's first piece is half of its share: 16 of its 32 items.
  EXPECT_EQ(by_caller.load(), 48);
}

// Loops longer than 32 bits of items are cut into units, and still covered exactly once.
TEST(ThreadPoolTest, CoversLoopsBeyondThirtyTwoBitsOfItems) {
  ThreadPool pool(3);
  const int64_t n = (int64_t{1} << 33) + 12345;
  std::vector<Chunk> chunks = RecordChunks(pool, n);
  std::sort(chunks.begin(), chunks.end(), [](const Chunk& a, const Chunk& b) { return a.b < b.b; });
  int64_t next = 0;
  for (const Chunk& c : chunks) {
    ASSERT_EQ(c.b, next);
    ASSERT_LT(c.b, c.e);
    next = c.e;
  }
  EXPECT_EQ(next, n);
}

// A worker acts on a prefetch hint while it waits: it asks for every line of each range.
TEST(ThreadPoolTest, AWaitingWorkerAsksForEveryLineOfItsHint) {
  ThreadPool pool(2);
  pool.ParallelFor(2, [](int64_t, int64_t) {});  // the worker is up and spinning
  std::vector<uint8_t> a(64 * 100), b(64 * 40);
  const ThreadPool::ByteRange ranges[] = {{a.data(), a.size()}, {b.data(), b.size()}};
  // Lines a range touches: unaligned starts take one more.
  const auto lines = [](const std::vector<uint8_t>& v) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
    return (p + v.size() - 1) / 64 - p / 64 + 1;
  };
  const uint64_t want = lines(a) + lines(b);
  const uint64_t before = pool.PrefetchedLines();
  pool.Prefetch(1, ranges);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pool.PrefetchedLines() - before < want && std::chrono::steady_clock::now() < deadline) {
    // Keep the worker awake: a sleeping one ignores hints.
    pool.ParallelFor(2, [](int64_t, int64_t) {});
    pool.Prefetch(1, ranges);
  }
  EXPECT_GE(pool.PrefetchedLines() - before, want);
}

// Hints never hold up a loop, however large, and bad ones are ignored: the caller's thread
// (0) and threads the pool does not have take none, and a range nobody mapped is harmless (a
// prefetch never faults).
TEST(ThreadPoolTest, HintsNeverHoldUpLoopsOrFault) {
  ThreadPool pool(3);
  std::vector<uint8_t> big(size_t{64} << 20);
  const ThreadPool::ByteRange huge[] = {{big.data(), big.size()}, {big.data(), big.size()}};
  const ThreadPool::ByteRange unmapped[] = {
      {reinterpret_cast<const void*>(uintptr_t{1} << 46), size_t{1} << 20}};
  const ThreadPool::ByteRange none[] = {{nullptr, 100}, {big.data(), 0}};
  for (int round = 0; round < 200; ++round) {
    pool.Prefetch(1 + round % 2, huge);
    pool.Prefetch(2 - round % 2, unmapped);
    pool.Prefetch(0, huge);
    pool.Prefetch(3, huge);
    pool.Prefetch(-1, none);
    std::atomic<int64_t> covered{0};
    pool.ParallelFor(1000, [&](int64_t b, int64_t e) { covered += e - b; });
    ASSERT_EQ(covered.load(), 1000);
    if (round % 3 == 0) pool.ClearPrefetches();
  }
  // Cleared, or replaced by nothing to ask for: once a loop has interrupted them, no more lines.
  pool.ClearPrefetches();
  pool.Prefetch(1, none);
  pool.ParallelFor(1000, [](int64_t, int64_t) {});
  const uint64_t lines = pool.PrefetchedLines();
  pool.ParallelFor(1000, [](int64_t, int64_t) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(pool.PrefetchedLines(), lines);
}

// A caller's smallest piece replaces the pool's: over two shares of 500 items, pieces of at least
// 300 leave 200 at most, so no chunk is smaller than that (the pool's own would go down to 31);
// and a smallest piece of 1 still covers the loop once.
TEST(ThreadPoolTest, ACallersSmallestPieceBoundsEveryChunk) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 20; ++rep) {
    int64_t covered = 0;
    for (const Chunk& c : RecordChunks(pool, 1000, 300)) {
      EXPECT_GE(c.e - c.b, 200) << "chunk [" << c.b << ", " << c.e << ")";
      covered += c.e - c.b;
    }
    EXPECT_EQ(covered, 1000);
  }
  std::vector<Chunk> fine = RecordChunks(pool, 1000, 1);
  std::sort(fine.begin(), fine.end(), [](const Chunk& a, const Chunk& b) { return a.b < b.b; });
  int64_t next = 0;
  for (const Chunk& c : fine) {
    ASSERT_EQ(c.b, next);
    next = c.e;
  }
  EXPECT_EQ(next, 1000);
}

// The default follows the CPUs the process may run on (taskset, a container's cpuset): with the
// calling thread held to one CPU it is 1, not the machine's count.
TEST(DefaultThreadCountTest, FollowsTheAffinityMask) {
#ifndef __linux__
  GTEST_SKIP() << "affinity masks are read on Linux";
#else
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  const int allowed = CPU_COUNT(&all);
  EXPECT_GE(DefaultThreadCount(), 1);
  EXPECT_LE(DefaultThreadCount(), allowed);
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const int held = DefaultThreadCount();
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(held, 1);
#endif
}

}  // namespace
}  // namespace moe
