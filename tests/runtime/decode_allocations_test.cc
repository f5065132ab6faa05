// A decode step allocates nothing once the scratch buffers have grown to size: steady-state
// generation makes no calls to the allocator (this binary counts every operator new).
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/runtime/engine.h"
#include "tests/support/fixture_dirs.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace moe {
namespace {

TEST(DecodeAllocationsTest, SteadyStateDecodeStepsAllocateNothing) {
  // Every attention and routing variant: grouped-query (sinks and windows in gpt-oss), latent
  // attention (deepseek2), dense layers and group routing.
  for (const char* name : {"tiny-qwen2moe-q4_0", "tiny-llama-moe-q8_0", "tiny-olmoe-f32",
                           "tiny-gptoss-mxfp4", "tiny-deepseek3-q8_0", "tiny-glm4moe-f32"}) {
    const std::string path = testing::FixtureGguf(testing::FixtureDir(name));
    auto engine = Engine::Load(path, LoadOptions{});
    ASSERT_TRUE(engine.ok()) << engine.status();
    const HParams& h = (*engine)->model()->hp();
    for (int threads : {1, 2}) {
      auto backend = CreateCpuBackend(threads);
      Transformer tf((*engine)->model(), backend.get());
      auto cache =
          KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim, DType::kF16, h.values_in_keys());
      ASSERT_TRUE(cache.ok());
      std::vector<float> logits;
      int32_t token = 1;
      // Warm-up until three rounds of steps in a row allocate nothing: scratch buffers grow to
      // their size, and each thread's own (thread-local) scratch is made the first time that
      // thread runs a kernel, which on a loaded machine a pool worker may first do many steps in.
      // First a batch long enough that every pool thread takes part in each kernel and makes
      // its scratch, at sizes a decode step never exceeds.
      std::vector<int32_t> batch(32);
      for (size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<int32_t>(11 + 17 * i);
      ASSERT_TRUE(tf.Forward(batch, *cache, LogitsFor::kLast, &logits).ok());
      cache->set_size(0);
      int quiet_rounds = 0;
      bool steady = false;
      for (int round = 0; round < 60 && !steady; ++round) {
        const long at = g_allocations.load();
        for (int i = 0; i < 4; ++i) {
          token = 7 + 13 * (round * 4 + i);
          ASSERT_TRUE(tf.Forward({&token, 1}, *cache, LogitsFor::kLast, &logits).ok());
          if (cache->size() > 40) cache->set_size(8);  // stay in the 64-token context
        }
        quiet_rounds = g_allocations.load() == at ? quiet_rounds + 1 : 0;
        steady = quiet_rounds == 3;
      }
      ASSERT_TRUE(steady) << name << ", threads " << threads << ": every warm-up round allocated";
      cache->set_size(8);
      const long before = g_allocations.load();
      for (int i = 0; i < 16; ++i) {
        token = 100 + 37 * i;  // other tokens route to other experts
        ASSERT_TRUE(tf.Forward({&token, 1}, *cache, LogitsFor::kLast, &logits).ok());
      }
      EXPECT_EQ(g_allocations.load() - before, 0) << name << ", threads " << threads;
    }
  }
}

}  // namespace
}  // namespace moe
