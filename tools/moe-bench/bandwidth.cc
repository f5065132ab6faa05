#include "tools/moe-bench/bandwidth.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "lib/base/anonymous_memory.h"

namespace moe::bench {
namespace {

// Sums 64-bit words; the compiler vectorizes it, and the result is used so it is not elided.
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t SumWords(const uint64_t* p,
                                                                               size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

}  // namespace

double MeasureReadBandwidth(int threads, double buffer_gib) {
  const size_t bytes = static_cast<size_t>(buffer_gib * (1ull << 30));
  const size_t words = bytes / 8;
  // The same kind of memory the weights live in (anonymous, huge pages where allowed), so the
  // limit is not understated by TLB misses the model itself does not pay.
  auto memory = AnonymousMemory::Allocate(words * 8);
  if (!memory.ok()) return 0;
  uint64_t* buf = reinterpret_cast<uint64_t*>((*memory)->data());
  // Touch every page from the threads that will read them.
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      size_t b = words * t / threads, e = words * (t + 1) / threads;
      for (size_t i = b; i < e; ++i) buf[i] = i;
    });
  }
  for (auto& th : pool) th.join();
  double best = 0;
  std::vector<uint64_t> sums(threads);
  for (int pass = 0; pass < 5; ++pass) {
    pool.clear();
    auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        size_t b = words * t / threads, e = words * (t + 1) / threads;
        sums[t] = SumWords(buf + b, e - b);
      });
    }
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, bytes / s / 1e9);
  }
  volatile uint64_t sink = 0;
  for (uint64_t v : sums) sink = sink + v;
  return best;
}

}  // namespace moe::bench
