// A persistent pool of worker threads for data-parallel loops. The calling thread takes part in
// every loop, so a pool of N threads starts N-1 workers. A decode step runs hundreds of short
// loops, so workers spin briefly before sleeping and wake-ups cost no system call while busy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace moe {

// One thread per core the system reports (at least one): the default of every pool and backend.
int DefaultThreadCount();

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, n) split into contiguous chunks taken by whichever thread is
  // free, cut where cuts() says (n no larger than cuts().size() + 1: one item per chunk);
  // returns when all chunks are done. Not re-entrant: fn must not call ParallelFor on the same
  // pool. One caller at a time.
  // fn is borrowed for the call (absl::FunctionRef): no allocation, whatever the lambda captures.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn);

  // Inside fn: which of the pool's threads runs it, 0 (the caller) to num_threads() - 1, so
  // that callers can keep per-thread scratch sized before the loop instead of growing it lazily
  // in whichever thread happens to take a chunk.
  static int CurrentThreadIndex();

  // Where a loop is cut, as shares of its work before each cut (increasing, all in (0, 1)):
  // each chunk takes 1/(2 threads) of what is left, the last ones 1/(16 threads) of the whole
  // (guided scheduling). With equal chunks the thread that ends last could keep the others
  // waiting for up to a whole chunk, at the end of each of the hundred loops of a decode step.
  // Callers that split by cost (the CPU backend's matrix passes) cut their loops here too.
  const std::vector<double>& cuts() const { return cuts_; }

 private:
  void WorkerLoop();
  void RunChunks();  // claims and runs chunks of the current loop until none is left

  std::vector<std::thread> workers_;
  std::vector<double> cuts_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  const absl::FunctionRef<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace moe
