// The SIMD attention kernels (AVX2, AVX-512) agree with the portable one for every head size path
// (fixed 64 and 128, any multiple of 16, others), F32, F16 and Q8_0 caches, grouped heads,
// one-position spans, sliding windows and attention sinks; and the portable one is
// softmax(q.k / sqrt(d)) . v computed here in double.
#include "lib/backend/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/half.h"

namespace moe {
namespace {

// Writes x as element i of a cache row in dtype (F32 or F16) and returns what the row now holds.
float PutValue(DType dtype, uint8_t* row, int64_t i, float x) {
  if (dtype == DType::kF32) {
    std::memcpy(row + 4 * i, &x, 4);
    return x;
  }
  const uint16_t h = FloatToHalf(x);
  std::memcpy(row + 2 * i, &h, 2);
  return HalfToFloat(h);
}

// Rows of row_len values in dtype, back to back; `values` becomes what the rows hold (F16 and
// Q8_0 round them).
std::vector<uint8_t> EncodeRows(DType dtype, std::vector<float>& values, int64_t row_len) {
  const int64_t rows = static_cast<int64_t>(values.size()) / row_len;
  const size_t row_bytes = RowBytes(dtype, row_len);
  std::vector<uint8_t> out(rows * row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    float* x = values.data() + r * row_len;
    uint8_t* row = out.data() + r * row_bytes;
    if (dtype == DType::kQ8_0) {
      EXPECT_TRUE(QuantizeRow(dtype, x, row, row_len).ok());
      DequantizeRow(dtype, row, x, row_len);
    } else {
      for (int64_t i = 0; i < row_len; ++i) x[i] = PutValue(dtype, row, i, x[i]);
    }
  }
  return out;
}

struct Case {
  int64_t head_dim, group, len;
  DType dtype;
};

TEST(AttentionKernelsTest, SimdMatchesPortableAndTheDefinition) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (const Case& c :
       {Case{64, 4, 37, DType::kF16}, Case{64, 1, 1, DType::kF32}, Case{128, 2, 130, DType::kF32},
        Case{80, 3, 17, DType::kF16}, Case{48, 5, 9, DType::kF32}, Case{40, 2, 12, DType::kF16},
        Case{36, 2, 7, DType::kF16}, Case{256, 2, 20, DType::kF16}, Case{64, 4, 37, DType::kQ8_0},
        Case{128, 2, 130, DType::kQ8_0}, Case{96, 3, 17, DType::kQ8_0},
        Case{32, 1, 5, DType::kQ8_0}, Case{64, 7, 45, DType::kF16}, Case{128, 5, 50, DType::kF16},
        Case{64, 8, 70, DType::kQ8_0},
        // A long head (150 KiB of V): its V rows are read ahead as the output sums take them.
        Case{128, 2, 300, DType::kF32}}) {
    const int64_t hd = c.head_dim, nkv = 2;  // two KV heads per row: use the second
    std::vector<float> q(c.group * hd), kf(c.len * nkv * hd), vf(c.len * nkv * hd);
    for (auto& x : q) x = nd(rng);
    for (auto& x : kf) x = nd(rng);
    for (auto& x : vf) x = nd(rng);
    // The test's values are what the cache holds.
    const std::vector<uint8_t> k = EncodeRows(c.dtype, kf, nkv * hd);
    const std::vector<uint8_t> v = EncodeRows(c.dtype, vf, nkv * hd);
    const size_t head_bytes = RowBytes(c.dtype, hd);
    std::vector<float> sinks(c.group);
    for (auto& x : sinks) x = 2 * nd(rng);
    // Whole span, a window shorter than it (and one of a single position), sinks, both; chunks
    // (Llama 4's) that the last position starts, ends or lies inside.
    struct Span {
      int64_t window;
      bool with_sinks, chunked;
    };
    for (auto [window, with_sinks, chunked] :
         {Span{0, false, false}, Span{c.len / 2 + 1, false, false}, Span{0, true, false},
          Span{c.len / 3 + 1, true, false}, Span{1, false, false}, Span{c.len / 3 + 1, false, true},
          Span{c.len, true, true}, Span{c.len > 1 ? c.len - 1 : 1, false, true}}) {
      SCOPED_TRACE("window " + std::to_string(window) + (with_sinks ? ", sinks" : "") +
                   (chunked ? ", chunked" : ""));
      AttentionHeads a;
      a.window = window;
      a.chunked = chunked;
      a.sinks = with_sinks ? sinks.data() : nullptr;
      a.q = q.data();
      a.group = c.group;
      a.head_dim = hd;
      a.len = c.len;
      a.k = k.data() + head_bytes;
      a.v = v.data() + head_bytes;
      a.row_bytes = static_cast<int64_t>(nkv * head_bytes);
      a.dtype = c.dtype;
      a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      // The definition, in double.
      std::vector<double> want(c.group * hd, 0.0);
      const int64_t last = c.len - 1;
      const int64_t first = window == 0 ? 0
                            : chunked   ? last - last % window
                                        : std::max<int64_t>(0, c.len - window);
      for (int64_t g = 0; g < c.group; ++g) {
        std::vector<double> s(c.len, 0.0);
        double max_s = with_sinks ? sinks[g] : -1e300, sum = 0;
        for (int64_t p = first; p < c.len; ++p) {
          for (int64_t i = 0; i < hd; ++i) s[p] += q[g * hd + i] * kf[(p * nkv + 1) * hd + i];
          s[p] *= a.scale;
          max_s = std::max(max_s, s[p]);
        }
        if (with_sinks) sum += std::exp(sinks[g] - max_s);  // joins the sum, carries no value
        for (int64_t p = first; p < c.len; ++p) sum += s[p] = std::exp(s[p] - max_s);
        for (int64_t p = first; p < c.len; ++p)
          for (int64_t i = 0; i < hd; ++i)
            want[g * hd + i] += s[p] / sum * vf[(p * nkv + 1) * hd + i];
      }
      for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
        if (level > DetectedSimdLevel()) continue;
        std::vector<float> out(c.group * hd, NAN);
        a.out = out.data();
        GetAttend(level, c.dtype, hd)(a);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], want[i], 1e-5)
              << CpuSimdLevelName(level) << " head_dim " << hd << " group " << c.group << " len "
              << c.len << " " << DTypeName(c.dtype) << " element " << i;
        }
      }
    }
  }
}

// A tile of consecutive tokens computes for each token exactly what a call for that token
// alone computes (prompt batches and decode steps agree), spans ending mid-block included.
TEST(AttentionKernelsTest, TileOfTokensEqualsOneTokenAtATime) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  struct TileCase {
    int64_t head_dim, group, tokens, len;
    DType dtype;
  };
  for (const TileCase& c :
       {TileCase{64, 4, 4, 37, DType::kF16}, TileCase{64, 4, 4, 1, DType::kF32},
        TileCase{128, 2, 8, 9, DType::kF16}, TileCase{80, 3, 5, 16, DType::kF32},
        TileCase{48, 1, 16, 30, DType::kF16}, TileCase{256, 8, 2, 33, DType::kF32},
        TileCase{64, 4, 4, 37, DType::kQ8_0}, TileCase{128, 2, 8, 9, DType::kQ8_0},
        TileCase{64, 7, 2, 40, DType::kF16}, TileCase{128, 3, 5, 21, DType::kF16}}) {
    const int64_t hd = c.head_dim, span = c.len + c.tokens - 1;
    const int64_t stride = (c.group + 1) * hd;  // other heads between one token's rows and the next
    std::vector<float> q(c.tokens * stride), kf(span * hd), vf(span * hd);
    for (auto& x : q) x = nd(rng);
    for (auto& x : kf) x = nd(rng);
    for (auto& x : vf) x = nd(rng);
    const std::vector<uint8_t> k = EncodeRows(c.dtype, kf, hd), v = EncodeRows(c.dtype, vf, hd);
    AttentionHeads a;
    a.group = c.group;
    a.head_dim = hd;
    a.k = k.data();
    a.v = v.data();
    a.row_bytes = static_cast<int64_t>(RowBytes(c.dtype, hd));
    a.dtype = c.dtype;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.q_stride = stride;
    std::vector<float> sinks(c.group);
    for (auto& x : sinks) x = nd(rng);
    struct Span {
      int64_t window;
      bool with_sinks, chunked;
    };
    // Chunks of 4 and of about half the span: the tile's tokens cross chunk boundaries.
    for (auto [window, with_sinks, chunked] :
         {Span{0, false, false}, Span{3, true, false}, Span{c.len / 2 + 2, false, false},
          Span{0, true, false}, Span{4, false, true}, Span{c.len / 2 + 2, true, true}}) {
      a.window = window;
      a.chunked = chunked;
      a.sinks = with_sinks ? sinks.data() : nullptr;
      for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
        if (level > DetectedSimdLevel()) continue;
        const AttendFn attend = GetAttend(level, c.dtype, hd);
        std::vector<float> tiled(q.size(), NAN), alone(q.size(), NAN);
        a.q = q.data();
        a.out = tiled.data();
        a.len = c.len;
        a.tokens = c.tokens;
        attend(a);
        for (int64_t i = 0; i < c.tokens; ++i) {
          AttentionHeads one = a;
          one.q = q.data() + i * stride;
          one.out = alone.data() + i * stride;
          one.len = c.len + i;
          one.tokens = 1;
          attend(one);
          for (int64_t j = 0; j < c.group * hd; ++j) {
            ASSERT_EQ(tiled[i * stride + j], alone[i * stride + j])
                << CpuSimdLevelName(level) << " head_dim " << hd << " token " << i << " at " << j
                << " window " << window << (with_sinks ? " sinks" : "")
                << (chunked ? " chunked" : "");
          }
        }
      }
    }
  }
}

// A paged cache (rows in blocks scattered over a pool, found through a block table) gives every
// kernel bit for bit what the same rows in one contiguous run give, for spans that end mid-block;
// with a sliding window, the blocks before the first token's window may be given back (their
// table entries then point far outside any memory: reading one would fault).
TEST(AttentionKernelsTest, PagedRowsEqualContiguousRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (DType dtype : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    for (int64_t hd : {64, 128, 80}) {
      if (dtype == DType::kQ8_0 && hd % 32 != 0) continue;  // Q8_0 caches need whole blocks
      const int64_t group = 2, tokens = 3, len = 19, span = len + tokens - 1;
      const int shift = 2;  // 4 positions per block
      const int64_t rows_per_block = int64_t{1} << shift;
      const int64_t n_table = (span + rows_per_block - 1) / rows_per_block;
      const int64_t row_bytes = static_cast<int64_t>(RowBytes(dtype, hd));
      const int64_t block_bytes = rows_per_block * row_bytes;
      // The table's blocks, out of order, in a pool with room for more.
      std::vector<int32_t> table(n_table);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), rng);
      for (auto& b : table) b = 2 * b + 1;
      std::vector<float> kf(span * hd), vf(span * hd);
      for (auto& x : kf) x = nd(rng);
      for (auto& x : vf) x = nd(rng);
      const std::vector<uint8_t> k = EncodeRows(dtype, kf, hd), v = EncodeRows(dtype, vf, hd);
      std::vector<uint8_t> pk(2 * n_table * block_bytes, 0xff), pv(2 * n_table * block_bytes, 0xff);
      for (int64_t p = 0; p < span; ++p) {
        const int64_t at = table[p >> shift] * block_bytes + (p % rows_per_block) * row_bytes;
        std::memcpy(pk.data() + at, k.data() + p * row_bytes, row_bytes);
        std::memcpy(pv.data() + at, v.data() + p * row_bytes, row_bytes);
      }
      std::vector<float> q(tokens * group * hd);
      for (auto& x : q) x = nd(rng);
      AttentionHeads a;
      a.q = q.data();
      a.group = group;
      a.head_dim = hd;
      a.len = len;
      a.tokens = tokens;
      a.q_stride = group * hd;
      a.k = k.data();
      a.v = v.data();
      a.row_bytes = row_bytes;
      a.dtype = dtype;
      a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      for (int64_t window : {0, 9}) {
        a.window = window;
        std::vector<int32_t> held = table;
        const int64_t first_seen = window > 0 ? len - window : 0;
        for (int64_t b = 0; (b + 1) * rows_per_block <= first_seen; ++b) held[b] = 1 << 28;
        AttentionHeads paged = a;
        paged.k = pk.data();
        paged.v = pv.data();
        paged.paging = {held.data(), shift, block_bytes};
        for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
          if (level > DetectedSimdLevel()) continue;
          const AttendFn attend = GetAttend(level, dtype, hd);
          std::vector<float> want(q.size(), NAN), got(q.size(), NAN);
          a.out = want.data();
          paged.out = got.data();
          attend(a);
          attend(paged);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
              << CpuSimdLevelName(level) << " head_dim " << hd << " " << DTypeName(dtype)
              << " window " << window;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe
