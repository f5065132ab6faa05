// The CPU backend's batch plumbing: experts that name their tokens in a shared input (and a
// shared expert that takes all of it) compute exactly what they compute on those tokens gathered
// by hand (or alone), and the weighted combine of
// expert outputs sums each row's terms in order.
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/backend/cpu/repack.h"

namespace moe {
namespace {

// A [rows x cols] matrix of random values stored as t (re-laid for this CPU when relay is set).
struct Matrix {
  std::vector<uint8_t> bytes;
  WeightView view;

  Matrix(DType t, int64_t rows, int64_t cols, bool relay, std::mt19937& rng) {
    std::normal_distribution<float> nd;
    std::vector<float> w(rows * cols);
    for (float& v : w) v = nd(rng);
    const size_t row_bytes = RowBytes(t, cols);
    bytes.resize(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(QuantizeRow(t, w.data() + r * cols, bytes.data() + r * row_bytes, cols).ok());
    }
    DType stored = t;
    if (relay) {
      stored = RepackedType(t, rows, cols, ActiveSimdLevel());
      RepackRows(t, bytes.data(), rows, cols, ActiveSimdLevel());
    }
    view = {stored, rows, cols, bytes.data()};
  }
};

struct Case {
  DType gate, up, down;
  bool relay;
};

TEST(CpuBackendTest, ExpertsOnNamedRowsEqualExpertsOnGatheredRows) {
  const int64_t d = 256, ff = 256, n = 10;  // whole K-quant blocks
  // Named rows: 4 tokens (a prompt-sized batch) and 2 (below the GEMM's batch size), so both
  // the copied 8-bit blocks and an expert's own quantization of gathered floats are covered.
  const std::vector<std::vector<int32_t>> expert_rows = {{0, 3, 5, 9}, {7, 2}};
  const Case cases[] = {
      {DType::kF32, DType::kF32, DType::kF32, false},
      {DType::kQ8_0, DType::kQ8_0, DType::kQ8_0, false},
      {DType::kQ8_0, DType::kQ8_0, DType::kQ8_0, true},
      {DType::kQ4_0, DType::kQ4_0, DType::kQ4_0, true},
      {DType::kQ4_K, DType::kQ4_K, DType::kQ6_K, true},
      {DType::kF32, DType::kQ8_0, DType::kQ4_0, false},  // float gate beside quantized up
  };
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  std::vector<float> in(n * d);
  for (float& v : in) v = nd(rng);
  auto backend = CreateCpuBackend(2);
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(DTypeName(c.gate), "/", DTypeName(c.up), "/", DTypeName(c.down),
                              c.relay ? " re-laid" : ""));
    std::vector<Matrix> gate, up, down;
    for (size_t e = 0; e < expert_rows.size(); ++e) {
      gate.emplace_back(c.gate, ff, d, c.relay, rng);
      up.emplace_back(c.up, ff, d, c.relay, rng);
      down.emplace_back(c.down, d, ff, c.relay, rng);
    }
    std::vector<std::vector<float>> gathered(expert_rows.size()), named_out(expert_rows.size()),
        gathered_out(expert_rows.size());
    std::vector<Backend::ExpertJob> named, by_hand;
    for (size_t e = 0; e < expert_rows.size(); ++e) {
      const auto& rows = expert_rows[e];
      const int64_t m = static_cast<int64_t>(rows.size());
      for (int32_t t : rows) gathered[e].insert(gathered[e].end(), &in[t * d], &in[(t + 1) * d]);
      named_out[e].assign(m * d, -1.f);
      gathered_out[e].assign(m * d, -2.f);
      named.push_back(
          {gate[e].view, up[e].view, down[e].view, in.data(), rows.data(), m, named_out[e].data()});
      by_hand.push_back({gate[e].view, up[e].view, down[e].view, gathered[e].data(), nullptr, m,
                         gathered_out[e].data()});
    }
    // A shared expert takes the whole input beside them: it runs on the input the named rows
    // were prepared from, and must compute what it computes alone.
    std::vector<float> shared_out(n * d, -3.f), alone_out(n * d, -4.f);
    named.push_back(
        {gate[0].view, up[0].view, down[0].view, in.data(), nullptr, n, shared_out.data()});
    const Backend::ExpertJob alone = {gate[0].view, up[0].view, down[0].view,    in.data(),
                                      nullptr,      n,          alone_out.data()};
    backend->RunExperts(named);
    backend->RunExperts(by_hand);
    backend->RunExperts({&alone, 1});
    for (size_t e = 0; e < expert_rows.size(); ++e) {
      EXPECT_EQ(named_out[e], gathered_out[e]) << "expert " << e;
    }
    EXPECT_EQ(shared_out, alone_out) << "shared expert";
  }
}

// The expert store runs a layer's routed experts in groups as their reads finish, the shared
// expert with the first group: what the shared expert computes must not depend on which routed
// experts share its call, even when their types differ from its own (K-quant against not).
TEST(CpuBackendTest, ASharedExpertComputesTheSameWhateverRoutedExpertsShareItsCall) {
  const int64_t d = 256, ff = 256, n = 6;
  const std::vector<int32_t> rows = {0, 2, 5};
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  std::vector<float> in(n * d);
  for (float& v : in) v = nd(rng);
  auto backend = CreateCpuBackend(2);
  for (bool relay : {false, true}) {
    SCOPED_TRACE(relay ? "re-laid" : "as stored");
    const Matrix sg(DType::kQ4_K, ff, d, relay, rng), su(DType::kQ4_K, ff, d, relay, rng),
        sd(DType::kQ6_K, d, ff, relay, rng);
    const Matrix rg(DType::kQ8_0, ff, d, relay, rng), ru(DType::kQ8_0, ff, d, relay, rng),
        rd(DType::kQ8_0, d, ff, relay, rng);
    std::vector<float> alone_out(n * d, -1.f), beside_out(n * d, -2.f), routed_out(3 * d, -3.f),
        routed_alone_out(3 * d, -4.f);
    const Backend::ExpertJob alone = {sg.view, su.view, sd.view,         in.data(),
                                      nullptr, n,       alone_out.data()};
    backend->RunExperts({&alone, 1});
    const Backend::ExpertJob routed_alone = {
        rg.view, ru.view, rd.view, in.data(), rows.data(), 3, routed_alone_out.data()};
    backend->RunExperts({&routed_alone, 1});
    const std::vector<Backend::ExpertJob> together = {
        {rg.view, ru.view, rd.view, in.data(), rows.data(), 3, routed_out.data()},
        {sg.view, su.view, sd.view, in.data(), nullptr, n, beside_out.data()}};
    backend->RunExperts(together);
    EXPECT_EQ(beside_out, alone_out);
    EXPECT_EQ(routed_out, routed_alone_out);
  }
}

// Products sharing one input, biases added as each row is made, equal each product alone plus
// its bias bit for bit, at decode and prompt sizes, for row-group and per-row layouts, and with
// prefetch hints posted before them (a hint changes no result).
TEST(CpuBackendTest, SharedProductsWithBiasesEqualEachProductThenItsBias) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  auto backend = CreateCpuBackend(2);
  const int64_t cols = 512;
  for (const bool relay : {false, true}) {
    for (const DType t : {DType::kF32, DType::kQ8_0, DType::kQ4_K}) {
      // Three matrices (as q, k, v), the middle one without a bias; 48 rows is 3 row groups.
      std::vector<Matrix> ms;
      for (const int64_t rows : {64, 48, 80}) ms.emplace_back(t, rows, cols, relay, rng);
      std::vector<std::vector<float>> bias(3);
      for (int i : {0, 2}) {
        bias[i].resize(ms[i].view.rows);
        for (float& v : bias[i]) v = nd(rng);
      }
      for (const int64_t n : {int64_t{1}, int64_t{9}}) {
        std::vector<float> x(n * cols);
        for (float& v : x) v = nd(rng);
        std::vector<std::vector<float>> want(3), got(3);
        const WeightView ws[] = {ms[0].view, ms[1].view, ms[2].view};
        for (int i = 0; i < 3; ++i) {
          want[i].resize(n * ws[i].rows);
          got[i].resize(n * ws[i].rows);
          backend->MatMul(ws[i], x.data(), n, want[i].data());
          for (int64_t r = 0; r < ws[i].rows && !bias[i].empty(); ++r) {
            for (int64_t t = 0; t < n; ++t) want[i][t * ws[i].rows + r] += bias[i][r];
          }
        }
        backend->PrefetchProducts(ws, n);
        const WeightView gate_up[] = {ms[0].view, ms[2].view};
        backend->PrefetchExperts(gate_up, n);
        float* const ys[] = {got[0].data(), got[1].data(), got[2].data()};
        const float* const biases[] = {bias[0].data(), nullptr, bias[2].data()};
        backend->MatMulShared(ws, x.data(), n, ys, biases);
        for (int i = 0; i < 3; ++i) {
          ASSERT_EQ(got[i], want[i])
              << DTypeName(t) << (relay ? " re-laid" : "") << " n " << n << " matrix " << i;
        }
      }
    }
  }
}

TEST(CpuBackendTest, AddWeightedRowsSumsEachRowsTermsThenAdds) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  auto backend = CreateCpuBackend(2);
  // A decode-sized call (inline) and a prompt-sized one (spread over the pool); 300 and 1000
  // are not multiples of the kernel's chunk.
  for (auto [n, k, dim] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 300}, {200, 5, 1000}}) {
    std::vector<float> terms(n * k * dim), w(n * k), x(n * dim);
    for (float& v : terms) v = nd(rng);
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng);
    std::vector<const float*> src(n * k);
    for (int64_t i = 0; i < n * k; ++i) src[i] = i % 4 == 1 ? nullptr : &terms[i * dim];
    std::vector<float> want = x;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < dim; ++i) {
        float sum = 0;
        for (int64_t j = 0; j < k; ++j) {
          if (src[t * k + j] != nullptr) sum += w[t * k + j] * src[t * k + j][i];
        }
        want[t * dim + i] += sum;
      }
    }
    backend->AddWeightedRows(n, k, dim, src.data(), w.data(), x.data());
    for (int64_t i = 0; i < n * dim; ++i) {
      ASSERT_NEAR(x[i], want[i], 1e-6f * (1 + std::abs(want[i]))) << "n " << n << " at " << i;
    }
  }
}

// The backend writes K and V into a paged cache through the block table and attends over it
// exactly as over a contiguous cache: a prompt batch, then a decode step.
TEST(CpuBackendTest, PagedKvCacheComputesWhatAContiguousOneComputes) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const int64_t n_head = 4, nkv = 2, hd = 64, row = nkv * hd;
  const int shift = 3;                              // 8 positions per block
  const std::vector<int32_t> table = {6, 1, 4, 0};  // 32 positions, blocks out of order
  const int64_t block_bytes = (int64_t{1} << shift) * row * 2;
  auto backend = CreateCpuBackend(2);
  std::vector<uint8_t> ck(32 * row * 2), cv(32 * row * 2), pk(8 * block_bytes), pv(8 * block_bytes);
  KvLayerView contiguous{DType::kF16, ck.data(), cv.data(), nkv, hd, {}};
  KvLayerView paged{DType::kF16, pk.data(), pv.data(), nkv, hd, {}};
  paged.paging = {table.data(), shift, block_bytes};
  for (int64_t n : {int64_t{21}, int64_t{1}}) {  // a prompt of 21 tokens, then one more
    const int32_t first = n == 21 ? 0 : 21;
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), first);
    std::vector<float> q(n * n_head * hd), k(n * row), v(n * row);
    for (auto* x : {&q, &k, &v})
      for (float& f : *x) f = nd(rng);
    backend->StoreKv(k.data(), v.data(), n, positions.data(), contiguous);
    backend->StoreKv(k.data(), v.data(), n, positions.data(), paged);
    std::vector<float> want(q.size(), NAN), got(q.size(), NAN);
    backend->Attention(q.data(), n, n_head, positions.data(), contiguous, want.data());
    backend->Attention(q.data(), n, n_head, positions.data(), paged, got.data());
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << n;
  }
  // Each position's row landed in its block, at its place in the block.
  for (int64_t p = 0; p < 22; ++p) {
    const int64_t at = table[p >> shift] * block_bytes + (p % 8) * row * 2;
    EXPECT_EQ(std::memcmp(pk.data() + at, ck.data() + p * row * 2, row * 2), 0) << p;
  }
}

// The caches keep each KV head's rows apart (KvPaging::head_stride: within each block, or over
// the whole context unpaged); the backend writes and attends through that layout exactly as
// through rows that hold every head, for each cache type: the same output bits, and each head's
// row of each position the same bytes as that head's part of the row-major row.
TEST(CpuBackendTest, HeadMajorKvLayoutsComputeWhatRowMajorComputes) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  const int64_t n_head = 6, nkv = 3, hd = 64, capacity = 40;
  const int shift = 3;                                 // 8 positions per block
  const std::vector<int32_t> table = {4, 0, 2, 5, 1};  // 40 positions, blocks out of order
  auto backend = CreateCpuBackend(2);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    const int64_t head_bytes = KvValuesBytes(dtype, hd), row_bytes = nkv * head_bytes;
    const int64_t block_bytes = (int64_t{1} << shift) * row_bytes;
    std::vector<uint8_t> rk(capacity * row_bytes), rv(rk.size());
    std::vector<uint8_t> pk(6 * block_bytes), pv(pk.size()), uk(rk.size()), uv(rk.size());
    KvLayerView row_major{dtype, rk.data(), rv.data(), nkv, hd, {}};
    KvLayerView paged{dtype, pk.data(), pv.data(), nkv, hd, {}};
    paged.paging = {table.data(), shift, block_bytes, head_bytes << shift};
    KvLayerView unpaged{dtype, uk.data(), uv.data(), nkv, hd, {}};
    unpaged.paging.head_stride = capacity * head_bytes;
    // A prompt of 29 tokens, then two decode steps.
    for (auto [first, n] : {std::pair<int32_t, int64_t>{0, 29}, {29, 1}, {30, 1}}) {
      std::vector<int32_t> positions(n);
      std::iota(positions.begin(), positions.end(), first);
      std::vector<float> q(n * n_head * hd), k(n * nkv * hd), v(k.size());
      for (auto* x : {&q, &k, &v})
        for (float& f : *x) f = nd(rng);
      std::vector<float> want(q.size(), NAN);
      backend->StoreKv(k.data(), v.data(), n, positions.data(), row_major);
      backend->Attention(q.data(), n, n_head, positions.data(), row_major, want.data());
      for (const KvLayerView* kv : {&paged, &unpaged}) {
        std::vector<float> got(q.size(), NAN);
        backend->StoreKv(k.data(), v.data(), n, positions.data(), *kv);
        backend->Attention(q.data(), n, n_head, positions.data(), *kv, got.data());
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << DTypeName(dtype) << " " << (kv == &paged ? "paged" : "unpaged") << " n " << n;
      }
    }
    for (int64_t p = 0; p < 31; ++p) {
      for (int64_t h = 0; h < nkv; ++h) {
        const uint8_t* want_k = rk.data() + p * row_bytes + h * head_bytes;
        const uint8_t* want_v = rv.data() + p * row_bytes + h * head_bytes;
        const int64_t at_paged =
            table[p >> shift] * block_bytes + h * (head_bytes << shift) + (p % 8) * head_bytes;
        const int64_t at_unpaged = h * capacity * head_bytes + p * head_bytes;
        EXPECT_EQ(std::memcmp(pk.data() + at_paged, want_k, head_bytes), 0) << p << " " << h;
        EXPECT_EQ(std::memcmp(pv.data() + at_paged, want_v, head_bytes), 0) << p << " " << h;
        EXPECT_EQ(std::memcmp(uk.data() + at_unpaged, want_k, head_bytes), 0) << p << " " << h;
        EXPECT_EQ(std::memcmp(uv.data() + at_unpaged, want_v, head_bytes), 0) << p << " " << h;
      }
    }
  }
}

// A layer's sequences attended in one call compute, each, what a call of its own computes:
// caches of different lengths, a prompt chunk among decode tokens, an empty entry, a window.
TEST(CpuBackendTest, AttentionOverManySequencesInOneCallEqualsOneCallEach) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  const int64_t n_head = 8, nkv = 2, hd = 64, row = nkv * hd;
  auto backend = CreateCpuBackend(2);
  struct Seq {
    int64_t cached, n;  // positions already in the cache, new rows this call
    std::vector<uint8_t> k, v;
    std::vector<int32_t> positions;
    std::vector<float> q;
  };
  std::vector<Seq> seqs;
  for (auto [cached, n] :
       {std::pair<int64_t, int64_t>{200, 1}, {3, 1}, {0, 37}, {90, 0}, {511, 1}, {64, 5}}) {
    Seq s{cached,
          n,
          std::vector<uint8_t>((cached + n) * row * 2),
          std::vector<uint8_t>((cached + n) * row * 2),
          {},
          {}};
    KvLayerView kv{DType::kF16, s.k.data(), s.v.data(), nkv, hd, {}};
    std::vector<float> k((cached + n) * row), v((cached + n) * row);
    for (auto* x : {&k, &v})
      for (float& f : *x) f = nd(rng);
    std::vector<int32_t> all(cached + n);
    std::iota(all.begin(), all.end(), 0);
    backend->StoreKv(k.data(), v.data(), cached + n, all.data(), kv);
    s.positions.assign(all.begin() + cached, all.end());
    s.q.resize(n * n_head * hd);
    for (float& f : s.q) f = nd(rng);
    seqs.push_back(std::move(s));
  }
  for (auto [window, chunked] : {std::pair<int64_t, bool>{0, false}, {48, false}, {48, true}}) {
    const AttentionOptions options{0.f, window, nullptr, chunked};
    std::vector<std::vector<float>> want, got;
    std::vector<Backend::AttentionSequence> calls;
    for (Seq& s : seqs) {
      KvLayerView kv{DType::kF16, s.k.data(), s.v.data(), nkv, hd, {}};
      want.emplace_back(s.q.size(), NAN);
      got.emplace_back(s.q.size(), NAN);
      if (s.n > 0) {
        backend->Attention(s.q.data(), s.n, n_head, s.positions.data(), kv, want.back().data(),
                           options);
      }
      calls.push_back({s.q.data(), s.n, s.positions.data(), kv, got.back().data()});
    }
    backend->AttentionBatch(calls, n_head, options);
    for (size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
          << "sequence " << i << ", window " << window << (chunked ? " chunked" : "");
      for (float f : got[i]) ASSERT_FALSE(std::isnan(f)) << "sequence " << i;
    }
  }
}

// Llama 3's RoPE frequency factors (llama.cpp's rope_freqs): pair i turns by
// position x freq_base^(-2i / n_rot) / factor[i], in both layouts, with and without YaRN (whose
// blend starts from the divided frequency, as ggml's rope_yarn takes theta_extrap).
TEST(CpuBackendTest, RopeFrequencyFactorsDivideEachPairsFrequency) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> factor(1.f, 8.f);
  auto backend = CreateCpuBackend(2);
  for (int trial = 0; trial < 8; ++trial) {
    SCOPED_TRACE(trial);
    const int64_t head_dim = 64, n_heads = 3, n = 5, half = head_dim / 2;
    std::vector<float> factors(half);
    for (float& f : factors) f = factor(rng);
    RopeParams rope;
    rope.layout = trial % 2 ? RopeLayout::kNorm : RopeLayout::kNeox;
    rope.n_rot = head_dim;
    rope.freq_base = 500000.f;
    rope.freq_factors = factors.data();
    const bool yarn = trial >= 4;
    if (yarn) {
      rope.yarn_factor = 8.f;
      rope.yarn_orig_ctx = 8192;
    }
    std::vector<float> x(n * n_heads * head_dim);
    for (float& v : x) v = nd(rng);
    std::vector<int32_t> positions = {0, 7, 300, 4000, 60000};
    std::vector<float> got = x;
    backend->Rope(got.data(), n, n_heads, head_dim, positions.data(), rope);
    RopeParams plain = rope;  // the same rotation from frequencies divided here
    plain.freq_factors = nullptr;
    const RopeCorrection corr = RopeCorrectionOf(plain);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const double freq = std::pow(500000.0, -2.0 * i / head_dim) / factors[i];
          double theta = positions[t] * freq;
          if (yarn) {
            const double ramp = RopePairRamp(plain, corr, i);
            theta = theta / 8 * (1 - ramp) + theta * ramp;
          }
          const int64_t a = rope.layout == RopeLayout::kNorm ? 2 * i : i;
          const int64_t b = rope.layout == RopeLayout::kNorm ? 2 * i + 1 : i + half;
          const float* v = x.data() + (t * n_heads + h) * head_dim;
          const float* w = got.data() + (t * n_heads + h) * head_dim;
          const double want_a = v[a] * std::cos(theta) - v[b] * std::sin(theta);
          const double want_b = v[a] * std::sin(theta) + v[b] * std::cos(theta);
          // float angles of up to ~6e4 radians: their rounding, times the values.
          EXPECT_NEAR(w[a], want_a, 2e-3) << t << " " << i;
          EXPECT_NEAR(w[b], want_b, 2e-3) << t << " " << i;
        }
      }
    }
  }
}

// The backend keeps a call's angles for the calls that follow at the same positions (q, then k,
// then every layer). A call at other positions, or with parameters that change the angles, must
// turn by its own: each result here equals a fresh backend's, bit for bit.
TEST(CpuBackendTest, RopeAfterOtherCallsTurnsByItsOwnAngles) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const int64_t head_dim = 64, n = 9;
  std::vector<float> factors(head_dim / 2, 1.f);
  RopeParams base;
  base.layout = RopeLayout::kNeox;
  base.n_rot = head_dim;
  base.freq_base = 10000.f;
  RopeParams yarn = base;
  yarn.yarn_factor = 4.f;
  yarn.yarn_orig_ctx = 2048;
  RopeParams with_factors = base;
  with_factors.freq_factors = factors.data();
  std::vector<int32_t> early(n), late(n);
  for (int64_t t = 0; t < n; ++t) {
    early[t] = static_cast<int32_t>(t);
    late[t] = static_cast<int32_t>(1000 + 3 * t);
  }
  struct Call {
    const std::vector<int32_t>* positions;
    RopeParams rope;
    int64_t heads;
    float factor7;  // factors[7] before the call
  };
  const Call calls[] = {{&early, base, 4, 1.f},          {&early, base, 16, 1.f},
                        {&late, base, 16, 1.f},          {&late, yarn, 4, 1.f},
                        {&late, with_factors, 4, 1.f},   {&late, with_factors, 4, 2.f},
                        {&early, with_factors, 16, 2.f}, {&early, base, 4, 2.f}};
  auto kept = CreateCpuBackend(2);
  for (size_t c = 0; c < std::size(calls); ++c) {
    SCOPED_TRACE(c);
    const Call& call = calls[c];
    factors[7] = call.factor7;
    std::vector<float> x(n * call.heads * head_dim);
    for (float& v : x) v = nd(rng);
    std::vector<float> got = x, want = x;
    kept->Rope(got.data(), n, call.heads, head_dim, call.positions->data(), call.rope);
    CreateCpuBackend(2)->Rope(want.data(), n, call.heads, head_dim, call.positions->data(),
                              call.rope);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    ASSERT_NE(std::memcmp(got.data(), x.data(), got.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace moe
