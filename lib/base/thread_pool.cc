#include "lib/base/thread_pool.h"

#include <algorithm>

namespace moe {
namespace {

// Chunk t of n split evenly over `parts`.
std::pair<int64_t, int64_t> Chunk(int64_t n, int parts, int t) {
  int64_t base = n / parts, extra = n % parts;
  int64_t begin = t * base + std::min<int64_t>(t, extra);
  return {begin, begin + base + (t < extra ? 1 : 0)};
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  int workers = std::max(1, num_threads) - 1;
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int parts = num_threads();
  if (parts == 1 || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    pending_ = parts - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  auto [b, e] = Chunk(n, parts, 0);
  if (b < e) fn(b, e);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
    }
    auto [b, e] = Chunk(n, num_threads(), index);
    if (b < e) (*job)(b, e);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace moe
