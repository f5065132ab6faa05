// The CUDA backend: each operation queued on the backend's stream through the kernels' launchers
// (kernels/), with the index arguments (positions, token ids, expert rows, block tables, the
// combine's sources) copied over first; the host waits only where it asks for bytes back
// (CopyToHost). A launch that fails is kept and reported by TakeError, which the forward pass
// asks at the end of every step.
#include "lib/backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/attention.h"
#include "kernels/combine.h"
#include "kernels/cuda_buffer.h"
#include "kernels/dequantize.h"
#include "kernels/elementwise.h"
#include "kernels/gated_activation.h"
#include "kernels/gemm.h"
#include "kernels/get_rows.h"
#include "kernels/quant_matvec.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/route.h"
#include "kernels/routed_experts.h"
#include "kernels/store_kv.h"
#include "lib/backend/backend_buffer.h"
#include "lib/backend/block_decode.h"
#include "lib/backend/cuda/cuda_module.h"
#include "lib/backend/cuda/device_weights.h"
#include "lib/backend/routed_expert_runner.h"

namespace moe {
namespace {

using cuda::CudaWeights;

// Grow-only device scratch for one role.
class Scratch {
 public:
  ~Scratch() {
    if (p_ != nullptr) cudaFree(p_);
  }
  std::string Reserve(size_t bytes) {
    if (bytes <= size_) return {};
    if (p_ != nullptr) cudaFree(p_);  // waits for the work still reading it
    p_ = nullptr;
    size_ = 0;
    if (cudaError_t e = cudaMalloc(&p_, bytes); e != cudaSuccess) {
      return cuda::CudaError("device scratch", e);
    }
    size_ = bytes;
    return {};
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

// Grow-only page-locked host memory, so that copies to and from it are asynchronous.
class PinnedBuffer {
 public:
  ~PinnedBuffer() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  bool Reserve(size_t bytes) {
    if (bytes <= size_) return true;
    if (p_ != nullptr) cudaFreeHost(p_);
    p_ = nullptr;
    size_ = 0;
    if (cudaMallocHost(&p_, bytes) != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      return false;
    }
    size_ = bytes;
    return true;
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

// The backend's stream; destroyed after what was queued on it has run, and after the cuBLAS
// handle and the scratch that use it (declared before them).
class Stream {
 public:
  ~Stream() {
    if (s_ != nullptr) {
      cudaStreamSynchronize(s_);
      cudaStreamDestroy(s_);
    }
  }
  cudaError_t Create() { return cudaStreamCreate(&s_); }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const CudaWeights> weights, std::unique_ptr<Backend> cpu)
      : weights_(std::move(weights)), cpu_(std::move(cpu)) {}
  ~CudaBackend() override {
    // The copies to and from the pinned buffers finish before those go.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (inputs_sent_ != nullptr) cudaEventDestroy(inputs_sent_);
    if (outputs_sent_ != nullptr) cudaEventDestroy(outputs_sent_);
  }

  absl::Status Init() {
    if (cudaError_t e = cudaSetDevice(weights_->device()); e != cudaSuccess) {
      return absl::InternalError(cuda::CudaError("selecting the device", e));
    }
    // A blocking stream: anything a launcher queues on the legacy default stream stays ordered
    // with it.
    if (cudaError_t e = stream_holder_.Create(); e != cudaSuccess) {
      return absl::InternalError(cuda::CudaError("creating a stream", e));
    }
    stream_ = stream_holder_.get();
    if (std::string e = blas_.Create(stream_); !e.empty()) return absl::InternalError(e);
    return absl::OkStatus();
  }

  absl::string_view name() const override { return "cuda"; }
  int num_threads() const override { return cpu_->num_threads(); }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    Bind();
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "could not allocate ", bytes, " bytes of device memory: ", cudaGetErrorString(e)));
    }
    return p;
  }
  void Free(void* p) override {
    Bind();
    if (p != nullptr) cudaFree(p);
  }
  void Zero(void* p, size_t bytes) override {
    Bind();
    Note(cudaMemsetAsync(p, 0, bytes, stream_), "zeroing");
  }
  void CopyToHost(const void* src, size_t bytes, void* host) override {
    Bind();
    if (bytes == 0) return;
    Note(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
    Note(cudaStreamSynchronize(stream_), "a queued operation");
  }
  void CopyFromHost(const void* host, size_t bytes, void* dst) override {
    Bind();
    if (bytes == 0) return;
    Note(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
    Note(cudaStreamSynchronize(stream_), "a queued operation");  // the host may reuse `host`
  }
  void CopyRows(const float* src, int64_t src_stride, int64_t n, int64_t len, float* dst,
                int64_t dst_stride) override {
    Bind();
    if (n == 0 || len == 0) return;
    Note(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float),
                           len * sizeof(float), n, cudaMemcpyDeviceToDevice, stream_),
         "copying rows");
  }

  absl::Status TakeError() override {
    if (error_.ok()) {
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) Note(e, "a kernel");
    }
    absl::Status s = error_;
    error_ = absl::OkStatus();
    return s;
  }

  void MatMul(const WeightView& w, const float* x, int64_t n, float* y) override {
    Bind();
    const std::optional<WeightView> d = OnDevice(w);
    if (!d) return;
    if (d->dtype == DType::kF32) {
      Note(
          cuda::GemmF32(blas_, reinterpret_cast<const float*>(d->data), d->rows, d->cols, x, n, y));
      return;
    }
    const BlockShape shape = QuantBlockShape(d->dtype);
    if (shape.elems == 0) {
      Fail(absl::StrCat("no device product for ", DTypeName(d->dtype), " weights"));
      return;
    }
    if (n == 1) {
      // K-quants take activations with one scale per super-block, as on the CPU.
      const int64_t span = shape.elems == 256 ? 8 : 1;
      if (!Note(q8_.Reserve(static_cast<size_t>(d->cols / 32) * sizeof(Q8Block)))) return;
      auto* q = static_cast<Q8Block*>(q8_.get());
      if (!Note(cuda::QuantizeActivationsOn(x, d->cols, span, q, stream_))) return;
      Note(cuda::QuantMatVecWarp(d->dtype, d->data, q, y, d->rows, d->cols, stream_));
      return;
    }
    if (!Note(gemm_w_.Reserve(static_cast<size_t>(d->rows * d->cols) * 2)) ||
        !Note(gemm_x_.Reserve(static_cast<size_t>(n * d->cols) * 2))) {
      return;
    }
    Note(cuda::GemmQuantF16(blas_, d->dtype, d->data, d->rows, d->cols, x, n, y, gemm_w_.get(),
                            gemm_x_.get()));
  }

  void MatMulShared(absl::Span<const WeightView> ws, const float* x, int64_t n,
                    absl::Span<float* const> ys, absl::Span<const float* const> biases) override {
    for (size_t i = 0; i < ws.size(); ++i) {
      MatMul(ws[i], x, n, ys[i]);
      if (i < biases.size() && biases[i] != nullptr) AddBias(ys[i], biases[i], n, ws[i].rows);
    }
  }

  void RunExperts(absl::Span<const ExpertJob> jobs) override {
    Bind();
    for (const ExpertJob& job : jobs) {
      if (job.activation == GatedActivation::kReluSquared) return NoReluSquared();
    }
    // Experts whose weights stay in host memory run on the CPU backend while the device runs
    // the others: their inputs are queued for the host before the device's experts (so waiting
    // for them is not waiting for that work), and their outputs go back behind it.
    host_jobs_.clear();
    job_on_device_.assign(jobs.size(), 0);
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (jobs[j].m == 0) continue;
      job_on_device_[j] = OnDeviceWeights(jobs[j]);
      if (!job_on_device_[j]) host_jobs_.push_back(jobs[j]);
    }
    const bool host_inputs = !host_jobs_.empty() && SendHostInputs();
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (!job_on_device_[j]) continue;
      const ExpertJob& job = jobs[j];
      const int64_t d = job.gate.cols;
      const float* in = job.in;
      if (job.rows != nullptr) {  // the expert's tokens out of the step's rows
        int32_t most = 0;
        for (int64_t i = 0; i < job.m; ++i) most = std::max(most, job.rows[i]);
        const int32_t* rows = Upload(kRows, job.rows, job.m);
        auto gathered = gathered_.Resize(*this, job.m * d);
        if (rows == nullptr || !Note(gathered.status())) return;
        if (!Note(
                cuda::GetRows(DType::kF32, job.in, most + 1, d, rows, job.m, *gathered, stream_))) {
          return;
        }
        in = *gathered;
      }
      RunExpertHere(job, in);
    }
    if (host_inputs) RunHostJobs();
  }

  bool routes_in_place() const override { return true; }

  void RouteTokens(const TokenRouting& c, const float* logits, const int32_t* positions, int64_t n,
                   int32_t* experts, float* weights, float* entropy) override {
    Bind();
    if (n == 0) return;
    TokenRouting dc = c;  // the same routing, its arrays on the device
    if (c.selection_bias != nullptr && (dc.selection_bias = Weights(c.selection_bias)) == nullptr) {
      return;
    }
    if (c.disabled != nullptr &&
        (dc.disabled = Upload(kDisabled, c.disabled, c.n_expert)) == nullptr) {
      return;
    }
    const int32_t* pos = nullptr;
    if (positions != nullptr && (pos = Upload(kPositions, positions, n)) == nullptr) return;
    if (!Note(route_scratch_.Reserve(cuda::RouteScratchBytes(c, n)))) return;
    Note(cuda::RouteTokens(dc, logits, pos, n, route_scratch_.get(), experts, weights, entropy,
                           stream_));
  }

  void RunRoutedExperts(const RoutedExperts& r, float* x) override {
    Bind();
    if (r.n == 0) return;
    if (r.activation == GatedActivation::kReluSquared) return NoReluSquared();
    const RoutedTable* table = TableFor(r.experts);
    if (table != nullptr && r.n <= kRoutedInPlaceRows) {
      RunRoutedHere(r, *table, x);
      return;
    }
    // Prompt-sized steps, and layers with experts in host memory: the routing comes back (one
    // wait), and each chosen expert runs once over its tokens (cuBLAS; on the CPU for those the
    // device does not hold).
    host_ids_.resize(r.n * r.k);
    host_weights_.resize(r.n * r.k);
    CopyToHost(r.ids, host_ids_.size() * sizeof(int32_t), host_ids_.data());
    CopyToHost(r.weights, host_weights_.size() * sizeof(float), host_weights_.data());
    if (r.shared_gate != nullptr) {
      host_gate_.resize(r.n);
      CopyToHost(r.shared_gate, host_gate_.size() * sizeof(float), host_gate_.data());
    }
    if (!error_.ok()) return;  // routing on what a failed operation left
    Note(routed_.Run(*this, r, host_ids_.data(), host_weights_.data(),
                     r.shared_gate != nullptr ? host_gate_.data() : nullptr, x));
  }

  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    Bind();
    const float* w = nullptr;  // an unweighted norm has none
    if (weight != nullptr && (w = Weights(weight)) == nullptr) return;
    Note(cuda::RmsNorm(x, w, n, dim, eps, y, stream_));
  }

  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& rope) override {
    Bind();
    RopeParams on_device = rope;  // the frequency factors are one of the model's vectors
    if (rope.freq_factors != nullptr &&
        (on_device.freq_factors = Weights(rope.freq_factors)) == nullptr) {
      return;
    }
    const int32_t* pos = Upload(kPositions, positions, n);
    if (pos != nullptr) Note(cuda::Rope(x, n, n_heads, head_dim, pos, on_device, stream_));
  }

  void StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
               const KvLayerView& kv) override {
    Bind();
    cuda::DeviceKv dkv;
    const int32_t* pos = Upload(kPositions, positions, n);
    if (pos == nullptr || !DeviceKvOf(kv, positions, n, &dkv)) return;
    Note(cuda::StoreKv(k, v, n, pos, dkv, stream_));
  }

  // No kernel yet (nothing here to verify one on): the step fails rather than compute wrongly.
  void NoReluSquared() {
    Note(absl::UnimplementedError(
        "CUDA backend: ungated relu^2 experts (Nemotron-H) run on the CPU backend only"));
  }

  void ShortConv(const float*, int64_t, const int32_t*, const float*, int64_t, const KvLayerView&,
                 float*) override {
    // No kernel yet: the step fails with this rather than compute on host pointers.
    Note(absl::UnimplementedError(
        "CUDA backend: short-convolution layers (LFM2) run on the CPU backend only"));
  }

  void SsmConv(const float*, int64_t, int64_t, const int32_t*, const float*, const float*, int64_t,
               const KvLayerView&, float*) override {
    NoMamba2();
  }
  void SsmScan(const SsmScanArgs&, int64_t, const int32_t*, const KvLayerView&, float*) override {
    NoMamba2();
  }
  void GatedGroupRmsNorm(const float*, const float*, int64_t, const float*, int64_t, int64_t,
                         int64_t, float, float*) override {
    NoMamba2();
  }
  // No kernels yet (delta_net_core.h holds the arithmetic for one): the step fails with this
  // rather than compute on host pointers.
  void GatedDeltaNet(const GatedDeltaArgs&, int64_t, const int32_t*, const KvLayerView&,
                     float*) override {
    NoGatedDeltaNet();
  }
  void MultiplyByGate(GateFunction, const float*, int64_t, float*) override { NoGatedDeltaNet(); }
  void NoGatedDeltaNet() {
    Note(absl::UnimplementedError(
        "CUDA backend: gated delta nets and output gates (qwen35moe) run on the CPU backend only"));
  }
  // No kernels yet (ssm_core.h holds the arithmetic for one): the step fails with this rather
  // than compute on host pointers.
  void NoMamba2() {
    Note(absl::UnimplementedError(
        "CUDA backend: Mamba-2 layers (granitehybrid) run on the CPU backend only"));
  }

  void Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                 const KvLayerView& kv, float* out, const AttentionOptions& options) override {
    Bind();
    cuda::DeviceKv dkv;
    const int32_t* pos = Upload(kPositions, positions, n);
    if (pos == nullptr || !DeviceKvOf(kv, positions, n, &dkv)) return;
    const float* sinks = nullptr;
    if (options.sinks != nullptr && (sinks = Weights(options.sinks)) == nullptr) return;
    Note(cuda::Attention(q, n, n_heads, pos, dkv, out, options.scale, options.window,
                         options.chunked, sinks, stream_));
  }

  void Axpy(float a, const float* x, int64_t count, float* y) override {
    Bind();
    Note(cuda::Axpy(a, x, count, y, stream_));
  }

  void Scale(float a, float* x, int64_t count) override {
    Bind();
    Note(cuda::Scale(a, x, count, stream_));
  }

  void ScaleRows(float* x, int64_t n, int64_t dim, const float* scales) override {
    Bind();
    const float* ds = Upload(kRowScales, scales, n);
    if (ds != nullptr) Note(cuda::ScaleRows(x, n, dim, ds, stream_));
  }

  void AddWeightedRows(int64_t n, int64_t k, int64_t dim, const float* const* src, const float* w,
                       float* x) override {
    Bind();
    const float* const* dsrc = Upload(kSources, src, n * k);
    const float* dw = Upload(kWeights, w, n * k);
    if (dsrc != nullptr && dw != nullptr) {
      Note(cuda::AddWeightedRows(n, k, dim, dsrc, dw, x, stream_));
    }
  }

  // x[t] += bias for n rows of length dim: the products' and the experts' biases.
  void AddBias(float* x, const float* bias, int64_t n, int64_t dim) {
    Bind();
    const float* b = Weights(bias);
    if (b != nullptr) Note(cuda::AddBias(x, b, n, dim, stream_));
  }

  void GetRows(const WeightView& table, const int32_t* ids, int64_t n, float* dst) override {
    Bind();
    const std::optional<WeightView> d = OnDevice(table);
    const int32_t* dids = Upload(kIds, ids, n);
    if (d && dids != nullptr) {
      Note(cuda::GetRows(d->dtype, d->data, d->rows, d->cols, dids, n, dst, stream_));
    }
  }

 private:
  // Device copies of index arguments, one buffer per role: a role's next upload is queued after
  // the operation that read the previous one.
  enum Role { kPositions, kIds, kRows, kSources, kWeights, kBlocks, kDisabled, kRowScales, kRoles };

  // Steps of up to this many rows run their routed experts by the device-side ids, one product
  // per choice (a decode step, or a few sequences' decode steps); larger ones (prompts) read the
  // routing back and run each chosen expert once over all its tokens.
  static constexpr int64_t kRoutedInPlaceRows = 16;

  // A layer's experts as the routed kernels find them: the device table and what its products
  // need. Built once per layer (keyed by the host views' array, checked against a copy of them).
  struct RoutedTable {
    std::vector<ExpertMatrices> host;
    Scratch device;  // RoutedExpert [experts]
    int64_t ff = 0, d = 0;
    bool usable = false;
    // Whether a gate/up (in) or down (act) matrix takes 8-bit blocks with one scale per block
    // (q1) or per 8 blocks (q8).
    bool q1_in = false, q8_in = false, q1_act = false, q8_act = false;
  };

  static bool SameViews(absl::Span<const ExpertMatrices> a, const std::vector<ExpertMatrices>& b) {
    if (a.size() != b.size()) return false;
    for (size_t e = 0; e < a.size(); ++e) {
      if (a[e].gate.data != b[e].gate.data || a[e].up.data != b[e].up.data ||
          a[e].down.data != b[e].down.data || a[e].gate_bias != b[e].gate_bias ||
          a[e].up_bias != b[e].up_bias || a[e].down_bias != b[e].down_bias) {
        return false;
      }
    }
    return true;
  }

  // The layer's table, or null when its experts cannot all run by device-side ids: one is held
  // in host memory (the hybrid split), or of a type the routed kernels do not read.
  const RoutedTable* TableFor(absl::Span<const ExpertMatrices> experts) {
    RoutedTable& t = tables_[experts.data()];
    if (!SameViews(experts, t.host)) {
      t.host.assign(experts.begin(), experts.end());
      t.usable = BuildTable(&t);
    }
    return t.usable ? &t : nullptr;
  }

  bool BuildTable(RoutedTable* t) {
    if (t->host.empty() || t->host[0].gate.empty()) return false;
    t->ff = t->host[0].gate.rows;
    t->d = t->host[0].gate.cols;
    t->q1_in = t->q8_in = t->q1_act = t->q8_act = false;
    std::vector<RoutedExpert> table(t->host.size());
    for (size_t e = 0; e < t->host.size(); ++e) {
      const ExpertMatrices& w = t->host[e];
      const WeightView* views[3] = {&w.gate, &w.up, &w.down};
      const float* biases[3] = {w.gate_bias, w.up_bias, w.down_bias};
      for (int i = 0; i < 3; ++i) {
        const bool down = i == kRoutedDown;
        const int64_t rows = down ? t->d : t->ff, cols = down ? t->ff : t->d;
        if (views[i]->empty() || views[i]->rows != rows || views[i]->cols != cols) return false;
        const std::optional<WeightView> dv = weights_->Find(*views[i]);
        if (!dv) return false;  // in host memory: the CPU runs it
        if (dv->dtype != DType::kF32) {
          const BlockShape shape = QuantBlockShape(dv->dtype);
          if (shape.elems == 0 || cols % shape.elems != 0) return false;
          bool& q8 = down ? t->q8_act : t->q8_in;
          bool& q1 = down ? t->q1_act : t->q1_in;
          (TakesSuperBlockScales(dv->dtype) ? q8 : q1) = true;
        }
        const float* bias = nullptr;
        if (biases[i] != nullptr && (bias = weights_->Find(biases[i])) == nullptr) return false;
        table[e].m[i] = {dv->data, bias, dv->dtype};
      }
    }
    const size_t bytes = table.size() * sizeof(RoutedExpert);
    if (!Note(t->device.Reserve(bytes))) return false;
    // Once per layer and model: a plain copy (it waits) rather than one kept alive for a queue.
    return Note(cudaMemcpy(t->device.get(), table.data(), bytes, cudaMemcpyHostToDevice),
                "copying an expert table to the device");
  }

  // 8-bit blocks of rows x cols floats for the products that take them: [q1 blocks | q8 blocks]
  // in `scratch`; false on a failure (noted).
  bool QuantizeFor(const float* x, int64_t rows, int64_t cols, bool q1, bool q8, Scratch& scratch,
                   const Q8Block** x1, const Q8Block** x8) {
    const int64_t blocks = rows * (cols / 32);
    *x1 = *x8 = nullptr;
    if (!q1 && !q8) return true;
    if (!Note(scratch.Reserve(2 * static_cast<size_t>(blocks) * sizeof(Q8Block)))) return false;
    auto* q = static_cast<Q8Block*>(scratch.get());
    if (q1) {
      if (!Note(cuda::QuantizeActivationsOn(x, rows * cols, 1, q, stream_))) return false;
      *x1 = q;
    }
    if (q8) {
      if (!Note(cuda::QuantizeActivationsOn(x, rows * cols, 8, q + blocks, stream_))) return false;
      *x8 = q + blocks;
    }
    return true;
  }

  // gate and up of every choice, the gated activation, down, then the combine: no host wait.
  void RunRoutedHere(const RoutedExperts& r, const RoutedTable& t, float* x) {
    const int64_t choices = r.n * r.k, ff = t.ff, d = t.d;
    const auto* table = static_cast<const RoutedExpert*>(t.device.get());
    const Q8Block *in1, *in8, *act1, *act8;
    if (!QuantizeFor(r.in, r.n, d, t.q1_in, t.q8_in, routed_in_q_, &in1, &in8)) return;
    auto g = gate_.Resize(*this, choices * ff);
    auto u = up_.Resize(*this, choices * ff);
    auto out = routed_out_.Resize(*this, choices * d);
    if (!Note(g.status()) || !Note(u.status()) || !Note(out.status())) return;
    if (!Note(cuda::RoutedMatVec(table, kRoutedGate, r.ids, choices, r.k, r.in, in1, in8, *g, ff, d,
                                 stream_)) ||
        !Note(cuda::RoutedMatVec(table, kRoutedUp, r.ids, choices, r.k, r.in, in1, in8, *u, ff, d,
                                 stream_))) {
      return;
    }
    const auto kind = r.activation == GatedActivation::kSwigluClamped
                          ? cuda::GatedActivationKind::kSwigluClamped
                          : cuda::GatedActivationKind::kSiluMul;
    if (!Note(cuda::GatedActivation(kind, *g, *u, *g, choices * ff, stream_))) return;
    if (!QuantizeFor(*g, choices, ff, t.q1_act, t.q8_act, routed_act_q_, &act1, &act8)) return;
    if (!Note(cuda::RoutedMatVec(table, kRoutedDown, r.ids, choices, 1, *g, act1, act8, *out, d, ff,
                                 stream_))) {
      return;
    }
    if (r.shared != nullptr) {
      const ExpertJob shared{r.shared->gate,    r.shared->up,
                             r.shared->down,    r.in,
                             nullptr,           r.n,
                             r.shared_out,      r.shared->gate_bias,
                             r.shared->up_bias, r.shared->down_bias};
      RunExperts({&shared, 1});
    }
    Note(cuda::AddRoutedRows(r.n, r.k, d, r.ids, r.weights, *out,
                             r.shared != nullptr ? r.shared_out : nullptr, r.shared_gate, x,
                             stream_));
  }

  template <typename T>
  T* Upload(Role role, const T* host, int64_t count) {
    if (count <= 0) return static_cast<T*>(meta_[role].get());
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    if (!Note(meta_[role].Reserve(bytes))) return nullptr;
    if (!Note(cudaMemcpyAsync(meta_[role].get(), host, bytes, cudaMemcpyHostToDevice, stream_),
              "copying indices to the device")) {
      return nullptr;
    }
    return static_cast<T*>(meta_[role].get());
  }

  std::optional<WeightView> OnDevice(const WeightView& w) {
    std::optional<WeightView> d = weights_->Find(w);
    if (!d) Fail("a weight matrix the forward pass uses is not on the device");
    return d;
  }
  const float* Weights(const float* host) {
    const float* d = weights_->Find(host);
    if (d == nullptr)
      Fail("a norm, bias or sink vector the forward pass uses is not on the device");
    return d;
  }

  bool DeviceKvOf(const KvLayerView& kv, const int32_t* positions, int64_t n, cuda::DeviceKv* out) {
    *out = {kv.dtype, kv.k, kv.v, kv.n_kv_heads, kv.head_dim, kv.paging};
    if (kv.paging.blocks == nullptr || n == 0) return true;
    int32_t most = 0;
    for (int64_t t = 0; t < n; ++t) most = std::max(most, positions[t]);
    const int64_t blocks = (int64_t{most} >> kv.paging.block_shift) + 1;
    out->paging.blocks = Upload(kBlocks, kv.paging.blocks, blocks);
    return out->paging.blocks != nullptr;
  }

  // gate, up (biases), the gated activation and down, on the device.
  void RunExpertHere(const ExpertJob& job, const float* in) {
    const int64_t ff = job.gate.rows, m = job.m;
    auto g = gate_.Resize(*this, m * ff);
    auto u = up_.Resize(*this, m * ff);
    if (!Note(g.status()) || !Note(u.status())) return;
    MatMul(job.gate, in, m, *g);
    MatMul(job.up, in, m, *u);
    if (job.gate_bias != nullptr) AddBias(*g, job.gate_bias, m, ff);
    if (job.up_bias != nullptr) AddBias(*u, job.up_bias, m, ff);
    const auto kind = job.activation == GatedActivation::kSwigluClamped
                          ? cuda::GatedActivationKind::kSwigluClamped
                          : cuda::GatedActivationKind::kSiluMul;
    if (!Note(cuda::GatedActivation(kind, *g, *u, *g, m * ff, stream_))) return;
    MatMul(job.down, *g, m, job.out);
    if (job.down_bias != nullptr) AddBias(job.out, job.down_bias, m, job.down.rows);
  }

  bool OnDeviceWeights(const ExpertJob& job) const {
    return weights_->Find(job.gate) && weights_->Find(job.up) && weights_->Find(job.down);
  }

  // The host jobs' inputs (each distinct input matrix once, all the rows any of them takes)
  // queued for pinned host memory, with an event behind them; host_jobs_ then point at the
  // copies. False on a failure (noted).
  bool SendHostInputs() {
    // The previous call's outputs may still be on their way out of the pinned buffer.
    if (outputs_sent_ != nullptr && !Note(cudaEventSynchronize(outputs_sent_), "a copy")) {
      return false;
    }
    struct Input {
      const float* device;
      int64_t rows, d;
      size_t offset;  // floats into the pinned input buffer
    };
    std::vector<Input> inputs;
    size_t in_floats = 0, out_floats = 0;
    for (const ExpertJob& job : host_jobs_) {
      int64_t rows = job.m;
      if (job.rows != nullptr) {
        rows = 0;
        for (int64_t i = 0; i < job.m; ++i) rows = std::max<int64_t>(rows, job.rows[i] + 1);
      }
      auto it = std::find_if(inputs.begin(), inputs.end(),
                             [&](const Input& in) { return in.device == job.in; });
      if (it == inputs.end()) {
        inputs.push_back({job.in, rows, job.gate.cols, in_floats});
        in_floats += static_cast<size_t>(rows * job.gate.cols);
      } else if (rows > it->rows) {  // the same input taken further: room for all of it
        in_floats += static_cast<size_t>((rows - it->rows) * it->d);
        it->rows = rows;
        size_t next = 0;
        for (Input& in : inputs) {
          in.offset = next;
          next += static_cast<size_t>(in.rows * in.d);
        }
      }
      out_floats += static_cast<size_t>(job.m * job.down.rows);
    }
    if (!pinned_in_.Reserve(in_floats * sizeof(float)) ||
        !pinned_out_.Reserve(out_floats * sizeof(float))) {
      Fail("could not allocate pinned host memory for the experts the CPU runs");
      return false;
    }
    if (inputs_sent_ == nullptr &&
        !Note(cudaEventCreateWithFlags(&inputs_sent_, cudaEventDisableTiming), "an event")) {
      return false;
    }
    auto* host_in = static_cast<float*>(pinned_in_.get());
    for (const Input& in : inputs) {
      if (!Note(cudaMemcpyAsync(host_in + in.offset, in.device,
                                static_cast<size_t>(in.rows * in.d) * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_),
                "copying expert inputs to the host")) {
        return false;
      }
    }
    if (!Note(cudaEventRecord(inputs_sent_, stream_), "an event")) return false;
    size_t out_offset = 0;
    auto* host_out = static_cast<float*>(pinned_out_.get());
    device_outs_.clear();
    for (ExpertJob& job : host_jobs_) {
      const auto in = std::find_if(inputs.begin(), inputs.end(),
                                   [&](const Input& i) { return i.device == job.in; });
      device_outs_.push_back(job.out);
      job.in = host_in + in->offset;
      job.out = host_out + out_offset;
      out_offset += static_cast<size_t>(job.m * job.down.rows);
    }
    return true;
  }

  // Once the inputs are on the host: the CPU backend runs every host job in one call (its two
  // parallel passes), while the device works through what was queued; the outputs go back on the
  // stream, behind that work.
  void RunHostJobs() {
    if (!Note(cudaEventSynchronize(inputs_sent_), "copying expert inputs to the host")) return;
    cpu_->RunExperts(host_jobs_);
    if (outputs_sent_ == nullptr &&
        !Note(cudaEventCreateWithFlags(&outputs_sent_, cudaEventDisableTiming), "an event")) {
      return;
    }
    for (size_t i = 0; i < host_jobs_.size(); ++i) {
      const ExpertJob& job = host_jobs_[i];
      if (!Note(cudaMemcpyAsync(device_outs_[i], job.out,
                                static_cast<size_t>(job.m * job.down.rows) * sizeof(float),
                                cudaMemcpyHostToDevice, stream_),
                "copying expert outputs to the device")) {
        return;
      }
    }
    Note(cudaEventRecord(outputs_sent_, stream_), "an event");
  }

  // The device is a property of the calling thread: a batch engine's scheduler thread, or any
  // thread a caller steps from, must select it before queuing work.
  void Bind() {
    thread_local int bound = -1;
    if (bound != weights_->device()) {
      Note(cudaSetDevice(weights_->device()), "selecting the device");
      bound = weights_->device();
    }
  }

  bool Note(const std::string& e) {
    if (e.empty()) return true;
    Fail(e);
    return false;
  }
  bool Note(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    cudaGetLastError();
    Fail(cuda::CudaError(what, e));
    return false;
  }
  bool Note(const absl::Status& s) {
    if (s.ok()) return true;
    if (error_.ok()) error_ = s;
    return false;
  }
  void Fail(const std::string& e) {
    if (error_.ok()) error_ = absl::InternalError(absl::StrCat("CUDA backend: ", e));
  }

  std::shared_ptr<const CudaWeights> weights_;
  std::unique_ptr<Backend> cpu_;
  Stream stream_holder_;
  cudaStream_t stream_ = nullptr;
  cuda::BlasHandle blas_;
  Scratch q8_, gemm_w_, gemm_x_, route_scratch_, routed_in_q_, routed_act_q_;
  std::unordered_map<const void*, RoutedTable> tables_;  // by the layer's expert views
  RoutedExpertRunner routed_;
  std::vector<int32_t> host_ids_;
  std::vector<float> host_weights_, host_gate_;
  BackendBuffer<float> routed_out_;
  Scratch meta_[kRoles];
  BackendBuffer<float> gathered_, gate_, up_;
  // The experts the CPU runs: their jobs (pointing at the pinned copies), the device outputs
  // they fill, and the events behind the copies each way.
  std::vector<ExpertJob> host_jobs_;
  std::vector<char> job_on_device_;  // per job of the call: its weights are all on the device
  std::vector<float*> device_outs_;
  PinnedBuffer pinned_in_, pinned_out_;
  cudaEvent_t inputs_sent_ = nullptr, outputs_sent_ = nullptr;
  absl::Status error_;
};

}  // namespace

namespace cuda {

absl::Status ModuleAvailable() {
  std::string why;
  if (DeviceCount(&why) > 0) return absl::OkStatus();
  constexpr absl::string_view kPrefix = "no CUDA device: ";
  absl::string_view reason = why;
  if (absl::StartsWith(reason, kPrefix)) reason.remove_prefix(kPrefix.size());
  return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", reason));
}

absl::StatusOr<std::shared_ptr<const DeviceWeights>> ModuleUpload(
    absl::Span<const HostTensor> tensors, const DeviceWeightsOptions& options) {
  absl::StatusOr<std::shared_ptr<const CudaWeights>> w = CudaWeights::Upload(tensors, options);
  if (!w.ok()) return w.status();
  return std::shared_ptr<const DeviceWeights>(*std::move(w));
}

absl::StatusOr<std::unique_ptr<Backend>> ModuleCreateBackend(
    std::shared_ptr<const DeviceWeights> weights, int cpu_threads) {
  if (weights == nullptr) return absl::InvalidArgumentError("no device weights");
  // ModuleUpload is the only maker of DeviceWeights in the module.
  auto cuda_weights = std::static_pointer_cast<const CudaWeights>(std::move(weights));
  auto backend =
      std::make_unique<CudaBackend>(std::move(cuda_weights), CreateCpuBackend(cpu_threads));
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace cuda

}  // namespace moe
