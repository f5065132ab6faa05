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
std::vector<Chunk> RecordChunks(ThreadPool& pool, int64_t n) {
  std::mutex mu;
  std::vector<Chunk> chunks;
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.push_back({ThreadPool::CurrentThreadIndex(), b, e});
  });
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

}  // namespace
}  // namespace moe
