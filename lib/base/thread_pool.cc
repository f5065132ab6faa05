#include "lib/base/thread_pool.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOE_CPU_RELAX() _mm_pause()
#else
#define MOE_CPU_RELAX() std::this_thread::yield()
#endif

namespace moe {

int DefaultThreadCount() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
namespace {

// Spin briefly (a decode step runs loops microseconds apart), then yield so that a thread that
// lost its core to another process gets it back soon, then sleep.
constexpr int kPauseIterations = 2000;
constexpr int kYieldIterations = 200;

// Guided cuts (ThreadPool::cuts): chunks taken in turn by whichever thread is free, so a thread
// slowed by the other's memory traffic or a late start does less, shrinking towards the end so
// that the last one to finish keeps the others waiting briefly.
std::vector<double> GuidedCuts(int threads) {
  std::vector<double> cuts;
  if (threads <= 1) return cuts;
  const double keep = 1.0 - 1.0 / (2 * threads), smallest = 1.0 / (16 * threads);
  double left = 1;
  while (left * (1 - keep) >= smallest) {
    left *= keep;
    cuts.push_back(1 - left);
  }
  while (left > 1.5 * smallest) {
    left -= smallest;
    cuts.push_back(1 - left);
  }
  return cuts;
}

// One step of waiting: pause, then yield; returns false once the caller should block.
bool WaitStep(int& spins) {
  ++spins;
  if (spins < kPauseIterations) {
    MOE_CPU_RELAX();
    return true;
  }
  std::this_thread::yield();
  return spins < kPauseIterations + kYieldIterations;
}

// Where chunk c of a loop over n items begins: item c when there are no more items than
// chunks, else the guided cut c - 1 of n.
int64_t ChunkBegin(const std::vector<double>& cuts, int64_t n, int64_t chunks, int64_t c) {
  if (c == 0) return 0;
  if (c >= chunks) return n;
  if (chunks == n) return c;
  return std::llround(static_cast<double>(n) * cuts[c - 1]);
}

}  // namespace

namespace {
// 0 on every thread that is not a pool worker (the callers of ParallelFor).
thread_local int current_thread_index = 0;
}  // namespace

int ThreadPool::CurrentThreadIndex() { return current_thread_index; }

ThreadPool::ThreadPool(int num_threads) : cuts_(GuidedCuts(std::max(1, num_threads))) {
  int workers = std::max(1, num_threads) - 1;
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, i] {
      current_thread_index = i + 1;
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int parts = num_threads();
  if (parts == 1 || n == 1) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_chunks_ = std::min<int64_t>(n, static_cast<int64_t>(cuts_.size()) + 1);
  next_chunk_.store(0, std::memory_order_relaxed);
  pending_.store(parts - 1, std::memory_order_relaxed);
  // Spinning workers see the new generation by themselves; the mutex is taken only to wake
  // sleeping ones, so a busy pool takes no lock per loop. (A worker going to sleep counts itself
  // in sleeping_ before it checks the generation, both sequentially consistent: either it sees
  // this generation or this thread sees it sleeping.)
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_all();
  }
  RunChunks();
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0;) {
    if (!WaitStep(spins)) std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= job_chunks_) return;
    const int64_t b = ChunkBegin(cuts_, job_n_, job_chunks_, c);
    const int64_t e = ChunkBegin(cuts_, job_n_, job_chunks_, c + 1);
    if (b < e) (*job_)(b, e);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
      if (WaitStep(spins)) continue;
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
      work_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      break;
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    RunChunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace moe
