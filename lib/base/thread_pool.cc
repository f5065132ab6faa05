#include "lib/base/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#ifdef __linux__
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOE_CPU_RELAX() _mm_pause()
#else
#define MOE_CPU_RELAX() std::this_thread::yield()
#endif

namespace moe {

namespace {

// A cgroup's CPU quota as whole CPUs, rounded up (0: none, or not readable): cgroup v2's
// "cpu.max" ("max 100000" or "200000 100000"), else v1's cfs_quota_us / cfs_period_us. Read at
// the mount point, which inside a container is the container's own group.
int CgroupCpuQuota() {
  long long quota = -1, period = 0;
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2) {
    std::string q;
    if (v2 >> q >> period && q != "max") quota = std::atoll(q.c_str());
  } else {
    std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    std::ifstream p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (!(q1 >> quota) || !(p1 >> period)) quota = -1;
  }
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>((quota + period - 1) / period);
}

}  // namespace

int DefaultThreadCount() {
  // The CPUs this process may run on, not those the machine has: under taskset, a container's
  // cpuset or CPU quota, a thread for each of the machine's cores would share the allowed ones,
  // and a pool whose threads wait on each other for their turn on a core runs several times
  // slower than one that fits (measured: 2 CPUs, 3 threads, decode at a third of the speed).
  int n = static_cast<int>(std::thread::hardware_concurrency());
#ifdef __linux__
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) n = CPU_COUNT(&allowed);
#endif
  if (const int quota = CgroupCpuQuota(); quota > 0) n = std::min(n, quota);
  return std::max(1, n);
}
namespace {

// Spin briefly (a decode step runs loops microseconds apart), then yield so that a thread that
// lost its core to another process gets it back soon, then sleep.
constexpr int kPauseIterations = 2000;
constexpr int kYieldIterations = 200;

// A share's front and back, packed so that one compare-and-swap moves either.
uint64_t Pack(uint64_t front, uint64_t back) { return front | back << 32; }
uint64_t Front(uint64_t span) { return span & 0xffffffffu; }
uint64_t Back(uint64_t span) { return span >> 32; }

constexpr int kHintLineBits = 22;
constexpr uint64_t kHintLineMask = (uint64_t{1} << kHintLineBits) - 1;

// Takes a piece of share from the front (the owner: half of what is left) or from the back
// (another thread: half of what is left), at least min_piece units; false when it is empty.
bool TakePiece(std::atomic<uint64_t>& share, bool front, uint64_t min_piece, uint64_t* b,
               uint64_t* e) {
  uint64_t span = share.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t f = Front(span), k = Back(span);
    if (f >= k) return false;
    const uint64_t take = std::min(k - f, std::max(min_piece, (k - f) / 2));
    const uint64_t next = front ? Pack(f + take, k) : Pack(f, k - take);
    if (share.compare_exchange_weak(span, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      *b = front ? f : k - take;
      *e = front ? f + take : k;
      return true;
    }
  }
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

}  // namespace

namespace {
// 0 on every thread that is not a pool worker (the callers of ParallelFor).
thread_local int current_thread_index = 0;
}  // namespace

int ThreadPool::CurrentThreadIndex() { return current_thread_index; }

ThreadPool::ThreadPool(int num_threads)
    : shares_(std::make_unique<Share[]>(std::max(1, num_threads))) {
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

void ThreadPool::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn,
                             int64_t min_piece) {
  if (n <= 0) return;
  const int parts = num_threads();
  if (parts == 1 || n == 1) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  // Shares count units of items so that front and back fit in 32 bits each.
  constexpr int64_t kMaxUnits = int64_t{1} << 31;
  unit_ = n < kMaxUnits ? 1 : (n + kMaxUnits / 2 - 1) / (kMaxUnits / 2);
  const int64_t units = (n + unit_ - 1) / unit_;
  min_piece_ = min_piece > 0 ? std::max<int64_t>(1, (min_piece + unit_ - 1) / unit_)
                             : std::max<int64_t>(1, units / (int64_t{kPartsPerThread} * parts));
  for (int i = 0; i < parts; ++i) {
    shares_[i].span.store(Pack(units * i / parts, units * (i + 1) / parts),
                          std::memory_order_relaxed);
  }
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
  RunChunks(0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0;) {
    if (!WaitStep(spins)) std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::Prefetch(int thread, absl::Span<const ByteRange> ranges) {
  if (thread <= 0 || thread >= num_threads()) return;
  uint64_t packed[kMaxPrefetchRanges] = {};
  for (size_t i = 0; i < ranges.size() && i < kMaxPrefetchRanges; ++i) {
    const ByteRange& r = ranges[i];
    if (r.p == nullptr || r.bytes == 0) continue;
    const uint64_t first = reinterpret_cast<uintptr_t>(r.p) >> 6;
    const uint64_t last = (reinterpret_cast<uintptr_t>(r.p) + r.bytes - 1) >> 6;
    if (first >> (64 - kHintLineBits) != 0) continue;  // not a user-space address
    packed[i] = first << kHintLineBits | std::min(last - first + 1, kHintLineMask);
  }
  Post(shares_[thread], packed);
}

void ThreadPool::Post(Share& share, const uint64_t (&ranges)[kMaxPrefetchRanges]) {
  for (int i = 0; i < kMaxPrefetchRanges; ++i)
    share.hint[i].store(ranges[i], std::memory_order_relaxed);
  share.hint_posts.store(share.hint_posts.load(std::memory_order_relaxed) + 1,
                         std::memory_order_release);
}

void ThreadPool::ClearPrefetches() {
  static constexpr uint64_t kNone[kMaxPrefetchRanges] = {};
  for (int t = 1; t < num_threads(); ++t) {
    for (const auto& h : shares_[t].hint) {
      if (h.load(std::memory_order_relaxed) != 0) {
        Post(shares_[t], kNone);
        break;
      }
    }
  }
}

uint64_t ThreadPool::PrefetchedLines() const {
  uint64_t lines = 0;
  for (int t = 1; t < num_threads(); ++t)
    lines += shares_[t].hint_lines.load(std::memory_order_relaxed);
  return lines;
}

void ThreadPool::RunHint(Share& mine, HintProgress& h, uint64_t seen) {
  // A few lines of each range between looks at the generation and the posts: a loop that
  // starts waits for this thread at most that long, and a new hint replaces this one as soon.
  constexpr uint64_t kLinesPerLook = 16;
  while (h.done < h.most) {
    if (generation_.load(std::memory_order_relaxed) != seen ||
        mine.hint_posts.load(std::memory_order_relaxed) != h.posts) {
      return;
    }
    const uint64_t end = std::min(h.most, h.done + kLinesPerLook);
    for (const uint64_t r : h.ranges) {
      const char* p = reinterpret_cast<const char*>((r >> kHintLineBits) << 6);
      const uint64_t stop = std::min(end, r & kHintLineMask);
      for (uint64_t i = h.done; i < stop; ++i) __builtin_prefetch(p + 64 * i, 0, 2);
      if (stop > h.done) mine.hint_lines.fetch_add(stop - h.done, std::memory_order_relaxed);
    }
    h.done = end;
  }
}

void ThreadPool::RunUnits(uint64_t b, uint64_t e) {
  const int64_t begin = static_cast<int64_t>(b) * unit_;
  const int64_t end = std::min(job_n_, static_cast<int64_t>(e) * unit_);
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::RunChunks(int self) {
  const int parts = num_threads();
  uint64_t b, e;
  while (TakePiece(shares_[self].span, /*front=*/true, min_piece_, &b, &e)) RunUnits(b, e);
  for (int k = 1; k < parts; ++k) {
    std::atomic<uint64_t>& other = shares_[(self + k) % parts].span;
    while (TakePiece(other, /*front=*/false, min_piece_, &b, &e)) RunUnits(b, e);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  Share& mine = shares_[current_thread_index];
  HintProgress hint;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
      if (const uint32_t posts = mine.hint_posts.load(std::memory_order_acquire);
          posts != hint.posts) {
        hint.posts = posts;
        hint.done = hint.most = 0;
        for (int i = 0; i < kMaxPrefetchRanges; ++i) {
          hint.ranges[i] = mine.hint[i].load(std::memory_order_relaxed);
          hint.most = std::max(hint.most, hint.ranges[i] & kHintLineMask);
        }
      }
      if (hint.done < hint.most) {
        RunHint(mine, hint, seen);
        spins = 0;
        continue;
      }
      if (WaitStep(spins)) continue;
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
      work_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      break;
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    RunChunks(current_thread_index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace moe
