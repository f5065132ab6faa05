#include "lib/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
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

// The guided cuts shrink towards the end: the first chunk takes 1/(2 threads) of the loop, no
// chunk is larger than the one before, the last ones are small; a loop of no more items than
// chunks runs one item per chunk, and a longer one is cut where the shares say.
TEST(ThreadPoolTest, ChunksShrinkTowardsTheEndOfALoop) {
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    const std::vector<double>& cuts = pool.cuts();
    ASSERT_GE(cuts.size(), static_cast<size_t>(2 * threads)) << threads;
    EXPECT_DOUBLE_EQ(cuts.front(), 1.0 / (2 * threads));
    double before = 0, previous = 1;
    for (double c : cuts) {
      ASSERT_GT(c, before);
      ASSERT_LT(c, 1.0);
      EXPECT_LE(c - before, previous + 1e-12) << threads;
      previous = c - before;
      before = c;
    }
    EXPECT_LE(1.0 - cuts.back(), 1.5 / (16 * threads)) << "the last chunk is small";

    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    auto record = [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(b, e);
    };
    const int64_t few = static_cast<int64_t>(cuts.size()) + 1;
    pool.ParallelFor(few, record);
    ASSERT_EQ(chunks.size(), static_cast<size_t>(few));
    for (auto [b, e] : chunks) EXPECT_EQ(e - b, 1);
    chunks.clear();
    const int64_t n = 100000;
    pool.ParallelFor(n, record);
    std::sort(chunks.begin(), chunks.end());
    ASSERT_EQ(chunks.size(), cuts.size() + 1);
    for (size_t c = 0; c < cuts.size(); ++c)
      EXPECT_EQ(chunks[c].second, std::llround(n * cuts[c])) << threads << " cut " << c;
    EXPECT_EQ(chunks.back().second, n);
  }
  EXPECT_TRUE(ThreadPool(1).cuts().empty());
}

}  // namespace
}  // namespace moe
