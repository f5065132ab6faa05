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
  for (const char* name : {"tiny-qwen2moe-q4_0", "tiny-llama-moe-q8_0", "tiny-olmoe-f32"}) {
    const std::string path =
        std::string(MOE_TESTDATA_DIR) + "/fixtures/" + name + "/" + name + ".gguf";
    auto engine = Engine::Load(path, LoadOptions{});
    ASSERT_TRUE(engine.ok()) << engine.status();
    const HParams& h = (*engine)->model()->hp();
    for (int threads : {1, 2}) {
      auto backend = CreateCpuBackend(threads);
      Transformer tf((*engine)->model(), backend.get());
      auto cache = KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim, DType::kF16);
      ASSERT_TRUE(cache.ok());
      std::vector<float> logits;
      int32_t token = 1;
      for (int i = 0; i < 4; ++i)  // warm-up: scratch buffers grow to their size
        ASSERT_TRUE(tf.Forward({&token, 1}, *cache, LogitsFor::kLast, &logits).ok());
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
