#include "lib/base/thread_pool.h"

#include <algorithm>

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

// A loop is cut into this many chunks per thread, taken in turn by whichever thread is free: a
// thread slowed by the other's memory traffic or a late start does less, not the whole wait.
constexpr int kChunksPerThread = 4;

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

// Chunk t of n split evenly over `parts`.
std::pair<int64_t, int64_t> Chunk(int64_t n, int parts, int t) {
  int64_t base = n / parts, extra = n % parts;
  int64_t begin = t * base + std::min<int64_t>(t, extra);
  return {begin, begin + base + (t < extra ? 1 : 0)};
}

}  // namespace

namespace {
// 0 on every thread that is not a pool worker (the callers of ParallelFor).
thread_local int current_thread_index = 0;
}  // namespace

int ThreadPool::CurrentThreadIndex() { return current_thread_index; }

ThreadPool::ThreadPool(int num_threads) {
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
  job_chunks_ = std::min<int64_t>(n, int64_t{parts} * kChunksPerThread);
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
    auto [b, e] = Chunk(job_n_, static_cast<int>(job_chunks_), static_cast<int>(c));
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
