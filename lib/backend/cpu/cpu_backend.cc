// The CPU backend: row-parallel kernels over a persistent thread pool.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "lib/backend/activation_core.h"
#include "lib/backend/backend.h"
#include "lib/backend/cpu/attention_kernels.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/half_rows.h"
#include "lib/backend/cpu/prefetch.h"
#include "lib/backend/cpu/prepared_activations.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/backend/cpu/recurrent_steps.h"
#include "lib/backend/cpu/rope_table.h"
#include "lib/backend/cpu/silu_mul.h"
#include "lib/backend/delta_net_core.h"
#include "lib/backend/norm_core.h"
#include "lib/backend/routed_expert_runner.h"
#include "lib/backend/ssm_core.h"
#include "lib/base/scratch_vector.h"
#include "lib/base/thread_pool.h"
#include "lib/moe/router.h"

namespace moe {
namespace {

// The rows a convolution over one sequence's step reads: row(p) for p >= first is row p - first
// of the step's (`stride` floats apart); before it, the ring carried in the slot of the block
// holding position first - 1 (KvLayerView::ConvRow); null before position 0.
struct ConvolutionRows {
  const KvLayerView& state;
  const float* step;
  int64_t stride;
  int64_t first;

  const float* Row(int64_t p) const {
    if (p >= first) return step + (p - first) * stride;
    if (p < 0) return nullptr;
    return state.ConvRow((first - 1) >> state.paging.block_shift, p);
  }

  // Carries the step's n rows, channels [c0, c1), in the rings of the slots of the blocks they
  // fall in, after every row of the step has been read. At a block's first position a slot other
  // than the block before's first takes that slot's ring over: the rows before the block that
  // its kernel reads.
  void Carry(int64_t n, int64_t c0, int64_t c1) const {
    const int shift = state.paging.block_shift;
    const int64_t mask = (int64_t{1} << shift) - 1;
    for (int64_t t = 0; t < n && state.conv_rows > 0; ++t) {
      const int64_t p = first + t, block = p >> shift;
      if (p > 0 && (p & mask) == 0 && state.state_table[block] != state.state_table[block - 1]) {
        for (int64_t r = 0; r < state.conv_rows; ++r) {
          const float* from = state.ConvRow(block - 1, r);
          std::copy(from + c0, from + c1, state.ConvRow(block, r) + c0);
        }
      }
      const float* row = step + t * stride;
      std::copy(row + c0, row + c1, state.ConvRow(block, p) + c0);
    }
  }
};

// y[i] += b[i], i < n.
void AddRow(const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += b[i];
}

// out[i] = max(u[i], 0)^2: Nemotron-H's ungated activation (the compiler vectorises it).
void ReluSquared(const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = u[i] > 0.f ? u[i] : 0.f;
    out[i] = r * r;
  }
}

// Splits the global row range [b, e) of several matrices laid end to end (first[i] is matrix
// i's first global row) into per-matrix local ranges: fn(i, r0, r1).
template <typename Fn>
void ForEachRange(const std::vector<int64_t>& first, int64_t b, int64_t e, Fn&& fn) {
  size_t i = std::upper_bound(first.begin(), first.end(), b) - first.begin() - 1;
  for (int64_t g = b; g < e; ++i) {
    const int64_t end = std::min(e, first[i + 1]);
    if (g < end) fn(i, g - first[i], end - first[i]);
    g = std::max(g, end);
  }
}

// A recurrent layer's state of one head (`floats` from `offset` in its block's slot) to update at
// position p: zero at position 0, and at a block's first position taken over from the block
// before (unless both name the same slot), so each block's slot ends holding the state after
// its last position (KvLayerView::state).
float* HeadStateAt(const KvLayerView& state, int64_t p, int64_t offset, int64_t floats) {
  const int shift = state.paging.block_shift;
  float* s = state.StateOfBlock(p >> shift) + offset;
  if (p == 0) {
    std::fill(s, s + floats, 0.f);
  } else if ((p & ((int64_t{1} << shift) - 1)) == 0) {
    const float* before = state.StateOfBlock((p >> shift) - 1) + offset;
    if (before != s) std::copy(before, before + floats, s);
  }
  return s;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o)
      : pool_(o.threads),
        quantize_activations_(o.quantize_activations),
        level_(ActiveSimdLevel()),
        silu_mul_(GetSiluMul(level_)),
        gated_delta_step_(GetGatedDeltaStep(level_)),
        ssm_scan_step_(GetSsmScanStep(level_)),
        swiglu_clamped_(GetSwigluClamped(level_)),
        to_halves_(GetToHalves(level_)),
        input_(level_, quantize_activations_) {}
  absl::string_view name() const override { return "cpu"; }
  int num_threads() const override { return pool_.num_threads(); }

  absl::StatusOr<void*> Allocate(size_t bytes) override { return HostMemory().Allocate(bytes); }
  void Free(void* p) override { HostMemory().Free(p); }
  void Zero(void* p, size_t bytes) override { HostMemory().Zero(p, bytes); }
  bool works_in_host_memory() const override { return true; }
  void CopyToHost(const void* src, size_t bytes, void* host) override {
    if (bytes > 0) std::memcpy(host, src, bytes);
  }
  void CopyFromHost(const void* host, size_t bytes, void* dst) override {
    if (bytes > 0) std::memcpy(dst, host, bytes);
  }
  void CopyRows(const float* src, int64_t src_stride, int64_t n, int64_t len, float* dst,
                int64_t dst_stride) override {
    for (int64_t t = 0; t < n; ++t) std::copy_n(src + t * src_stride, len, dst + t * dst_stride);
  }

  void MatMul(const WeightView& w, const float* x, int64_t n, float* y) override {
    float* ys[] = {y};
    MatMulShared({&w, 1}, x, n, ys, {});
  }

  void MatMulShared(absl::Span<const WeightView> ws, const float* x, int64_t n,
                    absl::Span<float* const> ys, absl::Span<const float* const> biases) override {
    std::vector<int64_t>& first_row = Sized(s_.first_row, ws.size() + 1);
    first_row[0] = 0;
    for (size_t i = 0; i < ws.size(); ++i) first_row[i + 1] = first_row[i] + ws[i].rows;
    PrepareInput(x, n, ws[0].cols, ws);
    std::vector<int64_t>& tokens = Sized(s_.tokens, ws.size());
    std::fill(tokens.begin(), tokens.end(), n);
    std::vector<int>& granule = Sized(s_.granule, ws.size());
    std::vector<int64_t>& cols = Sized(s_.cols, ws.size());
    for (size_t i = 0; i < ws.size(); ++i) {
      granule[i] = RowGroup(ws[i].dtype);
      cols[i] = ws[i].cols;
    }
    pool_.ClearPrefetches();  // the hints (PrefetchProducts) held while the input was prepared
    ParallelByCost(first_row, tokens, granule, cols, [&](int64_t b, int64_t e) {
      ForEachRange(first_row, b, e, [&](size_t i, int64_t r0, int64_t r1) {
        input_.Products(ws[i], r0, r1, ys[i] + r0, ws[i].rows);
        if (i < biases.size() && biases[i] != nullptr) {
          for (int64_t t = 0; t < n; ++t)
            AddRow(biases[i] + r0, r1 - r0, ys[i] + t * ws[i].rows + r0);
        }
      });
    });
  }

  void PrefetchProducts(absl::Span<const WeightView> ws, int64_t n) override {
    if (ReadBound(n)) HintShares(ws, 1);
  }
  void PrefetchExperts(absl::Span<const WeightView> gate_up, int64_t n) override {
    if (ReadBound(n)) HintShares(gate_up, 2);
  }

  void RunExperts(absl::Span<const ExpertJob> jobs) override {
    const size_t nj = jobs.size();
    if (nj == 0) return;
    while (job_inputs_.size() < nj) job_inputs_.emplace_back(level_, quantize_activations_);
    while (job_acts_.size() < nj) job_acts_.emplace_back(level_, quantize_activations_);
    // Grown, never shrunk: a dense layer's one job between mixture layers' several would free
    // the others' scratch and make them allocate again every step.
    if (act_.size() < nj) act_.resize(nj);
    std::vector<int64_t>& ff_first = Sized(s_.ff_first, nj + 1);
    std::vector<int64_t>& d_first = Sized(s_.d_first, nj + 1);
    std::vector<int64_t>& token_first = Sized(s_.token_first, nj + 1);
    ff_first[0] = d_first[0] = token_first[0] = 0;
    const PreparedActivations* shared = PrepareSharedInput(jobs);
    std::vector<const PreparedActivations*>& inputs = Sized(s_.job_in, nj);
    for (size_t j = 0; j < nj; ++j) {
      const ExpertJob& job = jobs[j];
      // An ungated block (relu^2) multiplies its input by up alone.
      const WeightView both[] = {job.gate, job.up};
      const absl::Span<const WeightView> in_weights =
          job.gate.empty() ? absl::MakeConstSpan(&job.up, 1) : absl::MakeConstSpan(both);
      bool fill = true;
      inputs[j] = &job_inputs_[j];
      if (shared != nullptr && TakesWholeInput(job, *shared)) {
        inputs[j] = shared;  // the shared expert: the layer input as prepared for all
        fill = false;
      } else if (job.rows != nullptr) {
        job_inputs_[j].PrepareGathered(shared, job.in, job.up.cols, job.rows, job.m, in_weights);
      } else {
        fill = job_inputs_[j].Prepare(job.in, job.m, job.up.cols, in_weights);
      }
      token_first[j + 1] = token_first[j] + (fill ? job.m : 0);
      act_[j].resize(job.m * job.up.rows);
      ff_first[j + 1] = ff_first[j] + job.up.rows;
      d_first[j + 1] = d_first[j] + job.down.rows;
    }
    PrepareJobTokens(token_first, jobs[0].up.cols, job_inputs_);
    // Pass 1: gate and up rows of every job, fused with SiLU x up.
    std::vector<int64_t>& tokens = Sized(s_.tokens, nj);
    std::vector<int>& ff_granule = Sized(s_.granule, nj);
    std::vector<int>& d_granule = Sized(s_.granule2, nj);
    // A row's columns: gate and up, or up alone (relu^2); the shared expert's down rows are as
    // many times longer than the routed experts' as its hidden size is wider.
    std::vector<int64_t>& ff_cols = Sized(s_.cols, nj);
    std::vector<int64_t>& d_cols = Sized(s_.cols2, nj);
    for (size_t j = 0; j < nj; ++j) {
      tokens[j] = jobs[j].m;
      ff_cols[j] = (jobs[j].gate.empty() ? 1 : 2) * jobs[j].up.cols;
      d_cols[j] = jobs[j].down.cols;
      ff_granule[j] = RowGroup(jobs[j].up.dtype);
      if (!jobs[j].gate.empty()) {
        ff_granule[j] = std::max(ff_granule[j], RowGroup(jobs[j].gate.dtype));
      }
      d_granule[j] = RowGroup(jobs[j].down.dtype);
    }
    // Every thread's gate/up scratch holds any share of any job's rows before the loop starts:
    // which rows a thread gets varies from step to step, and growing them lazily there would
    // allocate in whichever thread first took a larger share (a decode step must not).
    int64_t most = 0;
    for (const ExpertJob& job : jobs) most = std::max(most, job.m * job.up.rows);
    if (gate_up_scratch_.size() < static_cast<size_t>(pool_.num_threads())) {
      gate_up_scratch_.resize(pool_.num_threads());
    }
    for (auto& [g, u] : gate_up_scratch_) {
      if (static_cast<int64_t>(g.size()) < most) {
        g.resize(most);
        u.resize(most);
      }
    }
    // The down passes' inputs are the activations pass 1 makes. They are quantized in units of
    // columns (a block, or a super-block where the down weights take a scale per super-block),
    // each by the thread whose rows complete it: a loop over them after pass 1 read half of
    // them from the other core (on the 2-core bench VM a cache line takes ~0.25 us from one
    // core to the other; 8 sequences: ~18 us a layer).
    std::vector<int64_t>& unit = Sized(s_.act_unit, nj);
    std::vector<int64_t>& unit_first = Sized(s_.act_unit_first, nj + 1);
    unit_first[0] = 0;
    for (size_t j = 0; j < nj; ++j) {
      const bool quantize =
          job_acts_[j].Prepare(act_[j].data(), jobs[j].m, jobs[j].down.cols, {&jobs[j].down, 1});
      unit[j] = quantize ? job_acts_[j].ColumnUnit() : 0;
      unit_first[j + 1] = unit_first[j] + (quantize ? jobs[j].up.rows / unit[j] : 0);
    }
    s_.act_rows_done.assign(unit_first.back(), 0);
    pool_.ClearPrefetches();  // the hints (PrefetchExperts) held while the inputs were prepared
    ParallelByCost(ff_first, tokens, ff_granule, ff_cols, [&](int64_t b, int64_t e) {
      ScratchVector<float>& g = gate_up_scratch_[ThreadPool::CurrentThreadIndex()].first;
      ScratchVector<float>& u = gate_up_scratch_[ThreadPool::CurrentThreadIndex()].second;
      ForEachRange(ff_first, b, e, [&](size_t j, int64_t r0, int64_t r1) {
        const ExpertJob& job = jobs[j];
        const int64_t ff = job.up.rows, nr = r1 - r0;
        // Rows r0..r1 of gate and up for every token, as [m x nr] blocks.
        const bool gated = !job.gate.empty();
        if (gated) inputs[j]->Products(job.gate, r0, r1, g.data(), nr);
        inputs[j]->Products(job.up, r0, r1, u.data(), nr);
        for (int64_t t = 0; t < job.m; ++t) {
          float* gt = g.data() + t * nr;
          float* ut = u.data() + t * nr;
          if (job.gate_bias) AddRow(job.gate_bias + r0, nr, gt);
          if (job.up_bias) AddRow(job.up_bias + r0, nr, ut);
          float* out = act_[j].data() + t * ff + r0;
          if (job.activation == GatedActivation::kReluSquared) {
            ReluSquared(ut, out, nr);
          } else if (job.activation == GatedActivation::kSwigluClamped) {
            swiglu_clamped_(gt, ut, out, nr);
          } else {
            silu_mul_(gt, ut, out, nr);
          }
        }
        if (unit[j] > 0) {
          QuantizeCompletedUnits(job_acts_[j], r0, r1, unit[j],
                                 s_.act_rows_done.data() + unit_first[j]);
        }
      });
    });
    // Pass 2: down rows of every job (their inputs were quantized in pass 1).
    ParallelByCost(d_first, tokens, d_granule, d_cols, [&](int64_t b, int64_t e) {
      ForEachRange(d_first, b, e, [&](size_t j, int64_t r0, int64_t r1) {
        const ExpertJob& job = jobs[j];
        job_acts_[j].Products(job.down, r0, r1, job.out + r0, job.down.rows);
        if (job.down_bias) {
          for (int64_t t = 0; t < job.m; ++t) {
            AddRow(job.down_bias + r0, r1 - r0, job.out + t * job.down.rows + r0);
          }
        }
      });
    });
  }

  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    // Tokens (or heads) are independent: spread over the pool for prompt batches.
    Parallel(n, 2 * dim, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) RmsNormRow(x + t * dim, weight, dim, eps, y + t * dim);
    });
  }

  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& rope) override {
    const int64_t half = rope.n_rot / 2;
    if (rope_table_.Reset(positions, n, rope)) {
      Parallel(n, 8 * rope.n_rot, [&](int64_t tb, int64_t te) { rope_table_.FillTokens(tb, te); });
    }
    Parallel(n, n_heads * rope.n_rot, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        const float* cos_t = rope_table_.Row(t);
        const float* sin_t = cos_t + half;
        for (int64_t h = 0; h < n_heads; ++h) {
          float* v = x + (t * n_heads + h) * head_dim + rope.offset;
          for (int64_t i = 0; i < half; ++i) {
            int64_t a, b;
            RopePairIndex(rope, i, &a, &b);
            RopeRotate(v, a, b, cos_t[i], sin_t[i]);
          }
        }
      }
    });
  }

  void StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
               const KvLayerView& kv) override {
    const int64_t hd = kv.head_dim, row = kv.n_kv_heads * hd;
    const int64_t head_bytes = KvValuesBytes(kv.dtype, hd);
    Parallel(n, 2 * row, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        for (int64_t h = 0; h < kv.n_kv_heads; ++h) {
          const int64_t off = kv.paging.HeadRowOffset(positions[t], h, head_bytes, kv.n_kv_heads);
          const float* kh = k + t * row + h * hd;
          const float* vh = v + t * row + h * hd;
          if (kv.dtype == DType::kF32) {
            std::memcpy(kv.k + off, kh, hd * sizeof(float));
            std::memcpy(kv.v + off, vh, hd * sizeof(float));
          } else if (kv.dtype == DType::kQ8_0) {
            // Blocks of 32 within each head's row (head_dim is a multiple of 32: kv_type.h).
            (void)QuantizeRow(DType::kQ8_0, kh, kv.k + off, hd);
            (void)QuantizeRow(DType::kQ8_0, vh, kv.v + off, hd);
          } else {
            to_halves_(kh, hd, reinterpret_cast<uint16_t*>(kv.k + off));
            to_halves_(vh, hd, reinterpret_cast<uint16_t*>(kv.v + off));
          }
        }
      }
    });
  }

  void ShortConv(const float* bcx, int64_t n, const int32_t* positions, const float* kernel,
                 int64_t kernel_len, const KvLayerView& state, float* y) override {
    const int64_t dim = state.head_dim;
    std::vector<float>& bx = Sized(s_.conv_rows, static_cast<size_t>(n * dim));
    Parallel(n, 2 * dim, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        const float* b = bcx + t * 3 * dim;
        const float* x = b + 2 * dim;
        for (int64_t c = 0; c < dim; ++c) bx[t * dim + c] = b[c] * x[c];
      }
    });
    const ConvolutionRows rows{state, bx.data(), dim, positions[0]};
    Parallel(n, 2 * dim * kernel_len, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        const float* gate = bcx + t * 3 * dim + dim;
        float* out = y + t * dim;
        std::fill(out, out + dim, 0.f);
        // In the kernel's order, oldest first, as ggml_ssm_conv sums.
        for (int64_t k = 0; k < kernel_len; ++k) {
          const float* in = rows.Row(positions[t] - kernel_len + 1 + k);
          if (in == nullptr) continue;
          for (int64_t c = 0; c < dim; ++c) out[c] += kernel[c * kernel_len + k] * in[c];
        }
        for (int64_t c = 0; c < dim; ++c) out[c] *= gate[c];
      }
    });
    CarryConvolutionRows(rows, n, dim);
  }

  void SsmConv(const float* xbc, int64_t xbc_stride, int64_t n, const int32_t* positions,
               const float* kernel, const float* bias, int64_t kernel_len, const KvLayerView& state,
               float* out) override {
    const int64_t dim = state.head_dim;
    const ConvolutionRows rows{state, xbc, xbc_stride, positions[0]};
    Parallel(n, 4 * dim * kernel_len, [&](int64_t tb, int64_t te) {
      thread_local std::vector<const float*> in;
      in.resize(static_cast<size_t>(kernel_len));
      for (int64_t t = tb; t < te; ++t) {
        for (int64_t k = 0; k < kernel_len; ++k) {
          in[k] = rows.Row(positions[t] - kernel_len + 1 + k);
        }
        float* o = out + t * dim;
        for (int64_t c = 0; c < dim; ++c) {
          o[c] = SsmConvChannel(kernel + c * kernel_len, bias ? bias[c] : 0.f, kernel_len,
                                [&](int64_t k) { return in[k] ? in[k][c] : 0.f; });
        }
      }
    });
    CarryConvolutionRows(rows, n, dim);
  }

  // The step's rows into the carried rings, threads taking ranges of channels.
  void CarryConvolutionRows(const ConvolutionRows& rows, int64_t n, int64_t dim) {
    constexpr int64_t kChunk = 256;
    Parallel((dim + kChunk - 1) / kChunk, n * kChunk, [&](int64_t cb, int64_t ce) {
      rows.Carry(n, cb * kChunk, std::min(dim, ce * kChunk));
    });
  }

  void SsmScan(const SsmScanArgs& a, int64_t n, const int32_t* positions, const KvLayerView& state,
               float* y) override {
    const int64_t inner = a.heads * a.head_dim;
    const int64_t width = inner + 2 * a.groups * a.state_size;
    const int64_t heads_per_group = a.heads / a.groups;
    const int64_t head_floats = a.head_dim * a.state_size;
    // Heads are independent; a head's positions follow each other through its state.
    Parallel(a.heads, 4 * n * head_floats, [&](int64_t hb, int64_t he) {
      for (int64_t h = hb; h < he; ++h) {
        const int64_t g = h / heads_per_group;
        for (int64_t t = 0; t < n; ++t) {
          float* s = HeadStateAt(state, positions[t], h * head_floats, head_floats);
          const float* row = a.xbc + t * width;
          const float dt = SsmSoftplus(a.dt[t * a.dt_stride + h] + a.dt_bias[h]);
          ssm_scan_step_(s, row + h * a.head_dim, row + inner + g * a.state_size,
                         row + inner + (a.groups + g) * a.state_size, dt, a.a[h], a.d[h],
                         a.head_dim, a.state_size, y + t * inner + h * a.head_dim);
        }
      }
    });
  }

  void GatedDeltaNet(const GatedDeltaArgs& a, int64_t n, const int32_t* positions,
                     const KvLayerView& state, float* y) override {
    const int64_t size = a.size, head_floats = size * size, key_dim = a.key_heads * size;
    const int64_t inner = a.heads * size;
    const float scale = 1.f / std::sqrt(static_cast<float>(size));
    // Heads are independent; a head's positions follow each other through its state.
    Parallel(a.heads, 4 * n * head_floats, [&](int64_t hb, int64_t he) {
      thread_local std::vector<float> qk;
      qk.resize(static_cast<size_t>(2 * size));
      for (int64_t h = hb; h < he; ++h) {
        const int64_t r = a.heads / a.key_heads;
        const int64_t kh = a.grouped_heads ? h / r : h % a.key_heads;
        const int64_t beta_at = a.grouped_heads ? (h / r) * 2 * r + h % r : h;
        const int64_t alpha_at = a.grouped_heads ? beta_at + r : h;
        for (int64_t t = 0; t < n; ++t) {
          float* s = HeadStateAt(state, positions[t], h * head_floats, head_floats);
          const float* row = a.qkv + t * a.qkv_stride;
          DeltaNetL2Norm(row + kh * size, size, a.eps, qk.data());
          DeltaNetL2Norm(row + key_dim + kh * size, size, a.eps, qk.data() + size);
          const float g = SsmSoftplus(a.alpha[t * a.ab_stride + alpha_at] + a.dt_bias[h]) * a.a[h];
          gated_delta_step_(s, qk.data(), qk.data() + size, row + 2 * key_dim + h * size,
                            std::exp(g), GateSigmoid(a.beta[t * a.ab_stride + beta_at]), size,
                            scale, y + t * inner + h * size);
        }
      }
    });
  }

  void MultiplyByGate(GateFunction f, const float* gate, int64_t count, float* x) override {
    constexpr int64_t kChunk = 4096;
    Parallel((count + kChunk - 1) / kChunk, 4 * kChunk, [&](int64_t cb, int64_t ce) {
      const int64_t begin = cb * kChunk, end = std::min(count, ce * kChunk);
      if (f == GateFunction::kSilu) {  // the feed-forward's vector silu(gate) x up, in place
        silu_mul_(gate + begin, x + begin, x + begin, end - begin);
        return;
      }
      for (int64_t i = begin; i < end; ++i) x[i] *= GateSigmoid(gate[i]);
    });
  }

  void GatedGroupRmsNorm(const float* y, const float* z, int64_t z_stride, const float* weight,
                         int64_t n, int64_t dim, int64_t groups, float eps, float* out) override {
    const int64_t part = dim / groups;
    Parallel(n, 4 * dim, [&](int64_t tb, int64_t te) {
      thread_local std::vector<float> gated;
      gated.resize(static_cast<size_t>(dim));
      for (int64_t t = tb; t < te; ++t) {
        for (int64_t i = 0; i < dim; ++i) {
          gated[i] = SiluMulElement(z[t * z_stride + i], y[t * dim + i]);
        }
        for (int64_t g = 0; g < groups; ++g) {
          RmsNormRow(gated.data() + g * part, weight + g * part, part, eps,
                     out + t * dim + g * part);
        }
      }
    });
  }

  void Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                 const KvLayerView& kv, float* out, const AttentionOptions& options) override {
    const AttentionSequence one{q, n, positions, kv, out};
    AttentionBatch({&one, 1}, n_heads, options);
  }

  // One parallel loop over every sequence's jobs: a job is a tile of a sequence's consecutive
  // tokens and one KV head, whose query rows (tokens x group, about 16) share every cached row
  // the kernel loads. A tile's cost is its causal length, so a sequence's tiles are taken in the
  // order 0, last, 1, last - 1, ...: every contiguous share of its jobs gets as many long tiles
  // as short ones.
  void AttentionBatch(absl::Span<const AttentionSequence> seqs, int64_t n_heads,
                      const AttentionOptions& options) override {
    if (seqs.empty()) return;
    const KvLayerView& kv0 = seqs[0].kv;
    const int64_t hd = kv0.head_dim, nkv = kv0.n_kv_heads, group = n_heads / nkv;
    const int64_t head_bytes = KvValuesBytes(kv0.dtype, hd);
    const AttendFn attend = GetAttend(level_, kv0.dtype, hd);
    const float scale =
        options.scale != 0.f ? options.scale : 1.0f / std::sqrt(static_cast<float>(hd));
    const int64_t per_tile = std::max<int64_t>(1, 16 / group);
    std::vector<int64_t>& job_first = Sized(s_.attention_first, seqs.size() + 1);
    job_first[0] = 0;
    int64_t work = 0;  // multiply-adds, for whether the loop is worth the threads
    for (size_t i = 0; i < seqs.size(); ++i) {
      const AttentionSequence& s = seqs[i];
      const int64_t tiles = s.n > 0 ? (s.n + per_tile - 1) / per_tile : 0;
      job_first[i + 1] = job_first[i] + tiles * nkv;
      if (s.n > 0) {
        const int64_t mean_len = (s.positions[0] + s.positions[s.n - 1]) / 2 + 1;
        work += mean_len * hd * 2 * n_heads * s.n;
      }
    }
    const int64_t jobs = job_first.back();
    if (jobs == 0) return;
    Parallel(jobs, work / jobs, [&](int64_t b, int64_t e) {
      size_t i = 0;
      for (int64_t job = b; job < e; ++job) {
        while (job >= job_first[i + 1]) ++i;
        const AttentionSequence& s = seqs[i];
        const int64_t local = job - job_first[i];
        const int64_t tiles = (job_first[i + 1] - job_first[i]) / nkv;
        const int64_t ti = local / nkv, kvh = local % nkv;
        const int64_t t0 = (ti % 2 == 0 ? ti / 2 : tiles - 1 - ti / 2) * per_tile;
        const int64_t t1 = std::min(s.n, t0 + per_tile);
        const int32_t* positions = s.positions;
        // Tokens at consecutive positions share a call; others (not seen from the forward
        // pass, which numbers a batch's positions in order) go one at a time.
        int64_t run = 1;
        while (t0 + run < t1 && positions[t0 + run] == positions[t0] + run) ++run;
        for (int64_t t = t0; t < t1; t += (t == t0 ? run : 1)) {
          AttentionHeads a;
          a.q = s.q + (t * n_heads + kvh * group) * hd;
          a.out = s.out + (t * n_heads + kvh * group) * hd;
          a.group = group;
          a.head_dim = hd;
          a.len = static_cast<int64_t>(positions[t]) + 1;
          a.tokens = t == t0 ? run : 1;
          a.q_stride = n_heads * hd;
          a.k = s.kv.k + s.kv.paging.HeadStart(kvh, head_bytes);
          a.v = s.kv.v + s.kv.paging.HeadStart(kvh, head_bytes);
          a.row_bytes = s.kv.paging.HeadRowBytes(head_bytes, nkv);
          a.paging = s.kv.paging;
          a.dtype = s.kv.dtype;
          a.scale = scale;
          a.window = options.window;
          a.chunked = options.chunked;
          a.sinks = options.sinks ? options.sinks + kvh * group : nullptr;
          attend(a);
        }
      }
    });
  }

  // The routing is host memory here: routed in place, it is routed as the host path routes.
  void RouteTokens(const TokenRouting& c, const float* logits, const int32_t* positions, int64_t n,
                   int32_t* experts, float* weights, float* entropy) override {
    RouteEachToken(c, logits, positions, n, experts, weights, entropy);
  }

  void RunRoutedExperts(const RoutedExperts& r, float* x) override {
    absl::Status s = routed_.Run(*this, r, r.ids, r.weights, r.shared_gate, x);
    if (!s.ok() && error_.ok()) error_ = std::move(s);
  }

  absl::Status TakeError() override { return std::exchange(error_, absl::OkStatus()); }

  void Axpy(float a, const float* x, int64_t count, float* y) override {
    Parallel(count, 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] += a * x[i];
    });
  }

  void Scale(float a, float* x, int64_t count) override {
    Parallel(count, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x[i] *= a;
    });
  }

  void ScaleRows(float* x, int64_t n, int64_t dim, const float* scales) override {
    Parallel(n, dim, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        for (int64_t i = 0; i < dim; ++i) x[t * dim + i] *= scales[t];
      }
    });
  }

  void AddWeightedRows(int64_t n, int64_t k, int64_t dim, const float* const* src, const float* w,
                       float* x) override {
    Parallel(n, 2 * k * dim, [&](int64_t tb, int64_t te) {
      constexpr int64_t kChunk = 256;  // a row's sum is built in a buffer that stays in L1
      float sum[kChunk];
      for (int64_t t = tb; t < te; ++t) {
        for (int64_t c0 = 0; c0 < dim; c0 += kChunk) {
          const int64_t len = std::min(kChunk, dim - c0);
          std::fill_n(sum, len, 0.f);
          // Term by term over a chunk, as combine_core.h's WeightedSumAt sums each element.
          for (int64_t j = 0; j < k; ++j) {
            const float* s = src[t * k + j];
            if (s == nullptr) continue;
            const float a = w[t * k + j];
            for (int64_t i = 0; i < len; ++i) sum[i] += a * s[c0 + i];
          }
          float* xr = x + t * dim + c0;
          for (int64_t i = 0; i < len; ++i) xr[i] += sum[i];
        }
      }
    });
  }

  void GetRows(const WeightView& table, const int32_t* ids, int64_t n, float* dst) override {
    for (int64_t t = 0; t < n; ++t) {
      DequantizeWeightRow(table, ids[t], dst + t * table.cols);
    }
  }

 private:
  // Whether a product over this many tokens (at most, per matrix) waits on reading its weights
  // rather than on arithmetic, as the kernels judge it (kernels::kPrefetchTokens): the reading
  // ahead and the finer parts below are for those.
  static bool ReadBound(int64_t tokens) { return tokens < kernels::kPrefetchTokens; }

  // How much of its share of the next product a worker reads ahead (ThreadPool::Prefetch): the
  // caller's serial work between two loops of a decode step lasts a few microseconds, in which
  // a core reads well under this; more would only push other data out of its L2.
  static constexpr size_t kPrefetchShareBytes = 256 << 10;

  // Hints each worker to the front of its share of a product pass over ws: the rows of every
  // stride-th matrix laid end to end, each row read in the stride matrices from it on (gate and
  // up: 2), split across threads as the passes split rows of equal cost (one token's decode).
  void HintShares(absl::Span<const WeightView> ws, size_t stride) {
    const int threads = pool_.num_threads();
    if (threads == 1 || ws.empty()) return;
    int64_t total = 0;
    for (size_t i = 0; i < ws.size(); i += stride) total += ws[i].rows;
    for (int t = 1; t < threads; ++t) {
      int64_t row = total * t / threads;
      size_t i = 0;
      while (i < ws.size() && row >= ws[i].rows) {
        row -= ws[i].rows;
        i += stride;
      }
      if (i >= ws.size()) break;
      ThreadPool::ByteRange ranges[ThreadPool::kMaxPrefetchRanges] = {};
      for (size_t s = 0; s < stride && s < ThreadPool::kMaxPrefetchRanges && i + s < ws.size();
           ++s) {
        const WeightView& w = ws[i + s];
        if (w.empty()) continue;
        const int64_t r = row / 16 * 16;  // a row group's start in any layout
        ranges[s] = {w.row(r), std::min(kPrefetchShareBytes / stride,
                                        static_cast<size_t>(w.rows - r) * w.row_bytes())};
      }
      pool_.Prefetch(t, ranges);
    }
  }

  // Loops with fewer multiply-adds than this run inline.
  static constexpr int64_t kMinParallelWork = 1 << 15;

  // Makes input_ ready for products of x (n rows of cols) with weights, its tokens spread over
  // the pool.
  void PrepareInput(const float* x, int64_t n, int64_t cols, absl::Span<const WeightView> weights) {
    if (input_.Prepare(x, n, cols, weights)) {
      Parallel(n, cols, [&](int64_t b, int64_t e) { input_.PrepareTokens(b, e); });
    }
  }

  // Prepares (quantizes or gathers) the tokens of every job at once, spread over the pool: job
  // j's tokens are the global range [first[j], first[j + 1]) (empty where nothing is to do).
  void PrepareJobTokens(const std::vector<int64_t>& first, int64_t cols,
                        std::vector<PreparedActivations>& inputs) {
    Parallel(first.back(), cols, [&](int64_t b, int64_t e) {
      ForEachRange(first, b, e,
                   [&](size_t j, int64_t t0, int64_t t1) { inputs[j].PrepareTokens(t0, t1); });
    });
  }

  // Rows [r0, r1) of a pass-1 activation are made (input columns of `act`): each unit of columns
  // they complete (done[u]: its rows made so far, by any thread) is quantized here. The count's
  // acquire-release makes the other threads' rows of the unit visible to whoever completes it.
  static void QuantizeCompletedUnits(PreparedActivations& act, int64_t r0, int64_t r1, int64_t unit,
                                     int32_t* done) {
    for (int64_t u = r0 / unit; u * unit < r1; ++u) {
      const int64_t c0 = u * unit, c1 = c0 + unit;
      const auto rows = static_cast<int32_t>(std::min(r1, c1) - std::max(r0, c0));
      if (std::atomic_ref<int32_t>(done[u]).fetch_add(rows, std::memory_order_acq_rel) + rows ==
          unit) {
        act.PrepareColumns(c0, c1);
      }
    }
  }

  // The input that jobs naming rows share, quantized once for all its tokens (null when no job
  // names rows), for those jobs and for any job that takes it whole (the shared expert). Its
  // token count is one past the largest row named, or a whole job's count if larger.
  const PreparedActivations* PrepareSharedInput(absl::Span<const ExpertJob> jobs) {
    const float* in = nullptr;
    for (const ExpertJob& job : jobs) {
      if (job.rows != nullptr) {
        in = job.in;
        break;
      }
    }
    if (in == nullptr) return nullptr;
    int64_t n = 0;
    for (const ExpertJob& job : jobs) {
      if (job.in != in) continue;
      if (job.rows == nullptr) n = std::max(n, job.m);
      for (int64_t i = 0; job.rows != nullptr && i < job.m; ++i)
        n = std::max<int64_t>(n, job.rows[i] + 1);
    }
    // A job that takes the input whole (the shared expert) computes on it directly, so the
    // input is prepared for its weights alone: what it computes must not depend on which
    // routed experts share the call (the expert store runs them in groups as their reads
    // finish). The routed jobs take their own scales either way, copying the blocks only where
    // the two agree.
    bool whole = false;
    for (const ExpertJob& job : jobs) whole |= job.in == in && job.rows == nullptr && job.m == n;
    std::vector<WeightView>& weights = s_.shared_input_weights;
    weights.clear();
    for (const ExpertJob& job : jobs) {
      if (job.in != in || (job.rows == nullptr && job.m != n)) continue;
      if (whole && job.rows != nullptr) continue;
      if (!job.gate.empty()) weights.push_back(job.gate);
      weights.push_back(job.up);
    }
    PrepareInput(in, n, jobs[0].up.cols, weights);
    return &input_;
  }

  // A job that names no rows and takes all the shared input's tokens computes on it directly:
  // prepared for its weights too (PrepareSharedInput), so nothing is quantized twice.
  static bool TakesWholeInput(const ExpertJob& job, const PreparedActivations& shared) {
    return job.rows == nullptr && job.in == shared.x() && job.m == shared.n();
  }

  // Runs fn over [0, n) on the pool, or inline when the whole loop is too small to repay waking
  // the other threads (tiny routers, short attention spans on small models).
  template <typename Fn>
  void Parallel(int64_t n, int64_t work_per_item, Fn&& fn) {
    if (n * work_per_item < kMinParallelWork) {
      fn(int64_t{0}, n);
    } else {
      pool_.ParallelFor(n, fn);
    }
  }

  // Runs fn over the global rows [0, first.back()) of matrices laid end to end, splitting them
  // into contiguous ranges of about equal cost, where a row of matrix j costs its
  // token count plus the fixed cost of reading (and for prompt batches dequantizing) the row,
  // times its columns (cols[j]). The experts of a prompt batch get very different numbers of
  // tokens, so equal row counts would leave one thread waiting for the other; and a shared
  // expert's down rows are as many times longer than the routed experts' as it is wider (4x in
  // Qwen-MoE's layers), so counting rows alone handed the thread that took them the larger
  // share (bench model, per-step alternation in one run: 8 sequences -0.3 %, one -1 %).
  // Cuts within matrix j fall on multiples of granule[j] (the row groups of interleaved
  // layouts).
  template <typename Fn>
  void ParallelByCost(const std::vector<int64_t>& first, const std::vector<int64_t>& tokens,
                      const std::vector<int>& granule, const std::vector<int64_t>& cols, Fn&& fn) {
    // Parts of equal cost, as many as the pool wants (ThreadPool::kPartsPerThread): each thread
    // takes runs of neighbouring parts, which are neighbouring rows, in one call. With few
    // tokens a loop lasts tens of microseconds and a thread done first waits for the other's
    // last piece, at least one part: four times as many parts shortened that wait (decode, two
    // threads, per-token alternation in one run: about 2 % less time a token). Prompt-sized
    // loops keep the coarser parts.
    const int threads = pool_.num_threads();
    const bool read_bound = ReadBound(*std::max_element(tokens.begin(), tokens.end()));
    const int parts = threads * ThreadPool::kPartsPerThread * (read_bound ? 4 : 1);
    const int64_t total_rows = first.back();
    double total = 0;
    int64_t work = 0;  // multiply-adds
    for (size_t j = 0; j + 1 < first.size(); ++j) {
      total += static_cast<double>(first[j + 1] - first[j]) * (tokens[j] + 2.0) * cols[j];
      work += (first[j + 1] - first[j]) * tokens[j] * cols[j];
    }
    if (threads == 1 || work < kMinParallelWork) {
      fn(int64_t{0}, total_rows);
      return;
    }
    // bounds[p]..bounds[p+1] is part p: walk the matrices, cutting where the cost crosses
    // p / parts of the total.
    std::vector<int64_t>& bounds = Sized(s_.bounds, parts + 1);
    std::fill(bounds.begin(), bounds.end(), total_rows);
    bounds[0] = 0;
    double acc = 0;
    int p = 1;
    for (size_t j = 0; j + 1 < first.size() && p < parts; ++j) {
      const double row_cost = (tokens[j] + 2.0) * cols[j];
      const int64_t g = granule[j];
      for (int64_t r = first[j]; r < first[j + 1] && p < parts; r += g) {
        acc += row_cost * std::min(g, first[j + 1] - r);
        while (p < parts && acc >= total * p / parts) bounds[p++] = std::min(r + g, first[j + 1]);
      }
    }
    pool_.ParallelFor(
        parts,
        [&](int64_t pb, int64_t pe) {
          if (bounds[pb] < bounds[pe]) fn(bounds[pb], bounds[pe]);
        },
        /*min_piece=*/1);
  }

  ThreadPool pool_;
  // Per pool thread (ThreadPool::CurrentThreadIndex): gate and up products of RunExperts.
  std::vector<std::pair<ScratchVector<float>, ScratchVector<float>>> gate_up_scratch_;
  const bool quantize_activations_;
  const SimdLevel level_;
  const SiluMulFn silu_mul_;
  const GatedDeltaStepFn gated_delta_step_;
  const SsmScanStepFn ssm_scan_step_;
  const SiluMulFn swiglu_clamped_;
  const ToHalvesFn to_halves_;
  // Scratch reused across calls (a backend serves one session, one call at a time).
  PreparedActivations input_;
  RopeTable rope_table_;  // Rope's angles, for the calls that follow at the same positions
  RoutedExpertRunner routed_;
  absl::Status error_;  // RunRoutedExperts' first failure, for TakeError
  std::vector<PreparedActivations> job_inputs_, job_acts_;
  std::vector<ScratchVector<float>> act_;
  // Bookkeeping of the matrix and expert passes, reused so a decode step allocates nothing.
  struct Scratch {
    std::vector<int64_t> first_row, tokens, ff_first, d_first, token_first, bounds;
    std::vector<int64_t> attention_first;  // AttentionBatch: each sequence's first job
    std::vector<int> granule, granule2;
    std::vector<int64_t> cols, cols2;  // ParallelByCost's columns per matrix
    // RunExperts: each job's unit of activation columns quantized together (0: none), its
    // first unit, and the rows made of each unit.
    std::vector<int64_t> act_unit, act_unit_first;
    std::vector<int32_t> act_rows_done;
    std::vector<float> conv_rows;  // ShortConv's rows of the step
    std::vector<WeightView> shared_input_weights;
    std::vector<const PreparedActivations*> job_in;
  } s_;

  template <typename T>
  static std::vector<T>& Sized(std::vector<T>& v, size_t n) {
    v.resize(n);
    return v;
  }
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options) {
  CpuBackendOptions o = options;
  if (o.threads <= 0) o.threads = DefaultThreadCount();
  return std::make_unique<CpuBackend>(o);
}

std::unique_ptr<Backend> CreateCpuBackend(int threads) {
  CpuBackendOptions o;
  o.threads = threads;
  return CreateCpuBackend(o);
}

}  // namespace moe
