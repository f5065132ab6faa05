// Paged KV storage: sizes and errors, and two sequences sharing one pool through their block
// tables each attend exactly as they would over a contiguous cache of their own.
#include "lib/kv/paged_kv_storage.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kv/kv_block_pool.h"
#include "lib/kv/kv_cache.h"

namespace moe {
namespace {

TEST(PagedKvStorageTest, SizesAndErrors) {
  PagedKvShape shape{2, 2, 64, DType::kF16, 5};
  EXPECT_EQ(PagedKvStorage::BlockBytes(shape), size_t{2 * 2 * 32 * 2 * 64 * 2});
  auto s = PagedKvStorage::CreateForBytes(shape, 3 * PagedKvStorage::BlockBytes(shape) + 100);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->n_blocks(), 3);
  EXPECT_EQ(s->block_rows(), 32);
  EXPECT_EQ(s->byte_size(), 3 * PagedKvStorage::BlockBytes(shape));
  auto tiny = PagedKvStorage::CreateForBytes(shape, 100);
  EXPECT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("holds no block"), absl::string_view::npos);
  // Q8_0: 34 bytes per 32 values, heads of whole blocks only; other types are refused.
  EXPECT_EQ(PagedKvStorage::BlockBytes({2, 2, 64, DType::kQ8_0, 5}),
            size_t{2 * 2 * 32 * (2 * 64 / 32) * 34});
  EXPECT_TRUE(PagedKvStorage::Create({2, 2, 64, DType::kQ8_0, 5}, 4).ok());
  EXPECT_FALSE(PagedKvStorage::Create({2, 2, 48, DType::kQ8_0, 5}, 4).ok());
  EXPECT_FALSE(PagedKvStorage::Create({2, 2, 64, DType::kQ4_0, 5}, 4).ok());
  EXPECT_FALSE(PagedKvStorage::Create({2, 2, 64, DType::kF16, 17}, 4).ok());
  EXPECT_FALSE(PagedKvStorage::Create(shape, 0).ok());
}

TEST(PagedKvStorageTest, SequencesSharingAPoolAttendAsOverTheirOwnCaches) {
  const int64_t n_layer = 2, n_head = 4, nkv = 2, hd = 64, row = nkv * hd;
  PagedKvShape shape{n_layer, nkv, hd, DType::kF16, 2};  // 4 positions per block
  auto storage = PagedKvStorage::Create(shape, 16);
  ASSERT_TRUE(storage.ok()) << storage.status();
  auto pool = KvBlockPool::Create(16, 4);
  ASSERT_TRUE(pool.ok());
  auto backend = CreateCpuBackend(2);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  // Two sequences, 13 and 22 positions, their blocks allocated in turn (interleaved in the pool).
  const int64_t lens[2] = {13, 22};
  std::vector<int32_t> tables[2];
  for (int64_t p = 0; p < 22; p += 4) {
    for (int s = 0; s < 2; ++s) {
      if (p >= lens[s]) continue;
      auto b = pool->Allocate();
      ASSERT_TRUE(b.ok());
      tables[s].push_back(*b);
    }
  }
  // Both sequences write every layer first, then attend: one's rows must survive the other's.
  std::vector<KvCache> own;
  std::vector<std::vector<float>> queries[2];
  for (int s = 0; s < 2; ++s) {
    const int64_t n = lens[s];
    auto cache = KvCache::Create(n_layer, n, nkv, hd, DType::kF16);
    ASSERT_TRUE(cache.ok());
    own.push_back(*std::move(cache));
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    for (int64_t l = 0; l < n_layer; ++l) {
      std::vector<float> q(n * n_head * hd), k(n * row), v(n * row);
      for (auto* x : {&q, &k, &v})
        for (float& f : *x) f = nd(rng);
      backend->StoreKv(k.data(), v.data(), n, positions.data(), own[s].layer(l));
      backend->StoreKv(k.data(), v.data(), n, positions.data(), storage->layer(l, tables[s]));
      queries[s].push_back(q);
    }
  }
  for (int s = 0; s < 2; ++s) {
    const int64_t n = lens[s];
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    for (int64_t l = 0; l < n_layer; ++l) {
      const std::vector<float>& q = queries[s][l];
      std::vector<float> want(q.size(), NAN), got(q.size(), NAN);
      backend->Attention(q.data(), n, n_head, positions.data(), own[s].layer(l), want.data());
      backend->Attention(q.data(), n, n_head, positions.data(), storage->layer(l, tables[s]),
                         got.data());
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "sequence " << s << " layer " << l;
    }
  }
  pool->ReleaseTable(tables[0]);
  pool->ReleaseTable(tables[1]);
  EXPECT_EQ(pool->available(), 16);
}

}  // namespace
}  // namespace moe
