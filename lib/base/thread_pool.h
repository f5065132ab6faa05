// A persistent pool of worker threads for data-parallel loops. The calling thread takes part in
// every loop, so a pool of N threads starts N-1 workers. A decode step runs hundreds of short
// loops, so workers spin briefly before sleeping and wake-ups cost no system call while busy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"

namespace moe {

// One thread per CPU this process may use (at least one): the default of every pool and backend.
// That is the CPUs of its affinity mask (taskset, a container's cpuset), and no more than a
// cgroup CPU quota allows (a container's --cpus), not every CPU the machine has.
int DefaultThreadCount();

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, n) split into contiguous chunks; returns when all are done.
  // Each thread owns an equal share of [0, n) and takes it from the front in shrinking pieces
  // (half of what is left, at least 1/(16 threads) of the loop), so it reads one contiguous
  // stream, as the hardware prefetcher likes; a thread done with its own share takes half of
  // what is left of another's from the back, so a thread slowed by a late start or by the
  // other's memory traffic is not waited for. Not re-entrant: fn must not call ParallelFor on
  // the same pool. One caller at a time.
  // fn is borrowed for the call (absl::FunctionRef): no allocation, whatever the lambda captures.
  // min_piece (items; 0: the default above) sets the smallest piece instead, for callers whose
  // items are already parts of a loop cut to their own measure.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn, int64_t min_piece = 0);

  // Inside fn: which of the pool's threads runs it, 0 (the caller) to num_threads() - 1, so
  // that callers can keep per-thread scratch sized before the loop instead of growing it lazily
  // in whichever thread happens to take a chunk.
  static int CurrentThreadIndex();

  // Callers that cut a loop into parts of equal cost themselves (the CPU backend's matrix
  // passes) make this many per thread: the smallest piece a thread takes is one part.
  static constexpr int kPartsPerThread = 16;

  // Asks worker `thread` (1 to num_threads() - 1) to bring the byte ranges into its cache while
  // it waits for the next loop (at most kMaxPrefetchRanges, 256 MiB each, taken in turn): in a
  // decode step the memory idles while the caller works alone between loops, and the next
  // loop's reads can start in cache instead. A hint holds until it is replaced or cleared; a
  // loop interrupts it and the worker goes on with it after. A sleeping worker ignores it.
  static constexpr int kMaxPrefetchRanges = 2;
  struct ByteRange {
    const void* p;
    size_t bytes;
  };
  void Prefetch(int thread, absl::Span<const ByteRange> ranges);
  void ClearPrefetches();
  // Cache lines the workers have asked for on hints, since the pool started.
  uint64_t PrefetchedLines() const;

 private:
  // One thread's share of the current loop: [front, back) in units, front in the low 32 bits.
  // Its owner advances front, the others lower back, each by compare-and-swap.
  struct alignas(64) Share {
    std::atomic<uint64_t> span{0};
    // The worker's prefetch hint, per range: first line's address / 64 in the high 42 bits,
    // lines in the low 22 (0: none); and the hints posted, so that a new one restarts it.
    std::atomic<uint64_t> hint[kMaxPrefetchRanges] = {};
    std::atomic<uint32_t> hint_posts{0};
    std::atomic<uint64_t> hint_lines{0};  // lines asked for (PrefetchedLines)
  };
  void WorkerLoop();
  // Runs pieces of thread self's share, then of the others', until none is left.
  void RunChunks(int self);
  // Runs units [b, e) of the current loop.
  void RunUnits(uint64_t b, uint64_t e);
  // The worker's current hint and how far it got.
  struct HintProgress {
    uint32_t posts = 0;
    uint64_t ranges[kMaxPrefetchRanges] = {};
    uint64_t done = 0;  // lines asked for in each range
    uint64_t most = 0;  // lines of the longest range
  };
  // Replaces share's hint (the caller's thread only).
  static void Post(Share& share, const uint64_t (&ranges)[kMaxPrefetchRanges]);
  // Asks for the hint's lines from where it got, a few of each range in turn, until all are
  // asked for or a loop starts.
  void RunHint(Share& mine, HintProgress& h, uint64_t seen);

  std::vector<std::thread> workers_;
  std::unique_ptr<Share[]> shares_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  const absl::FunctionRef<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t unit_ = 1;        // items per unit (1 unless a loop has more than 2^31 items)
  uint64_t min_piece_ = 1;  // units
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace moe
