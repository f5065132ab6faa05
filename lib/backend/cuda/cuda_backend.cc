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
#include "kernels/store_kv.h"
#include "lib/backend/backend_buffer.h"
#include "lib/backend/block_decode.h"
#include "lib/backend/cuda/cuda_module.h"
#include "lib/backend/cuda/device_weights.h"

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
                    absl::Span<float* const> ys) override {
    for (size_t i = 0; i < ws.size(); ++i) MatMul(ws[i], x, n, ys[i]);
  }

  void RunExperts(absl::Span<const ExpertJob> jobs) override {
    Bind();
    for (const ExpertJob& job : jobs) {
      if (job.m == 0) continue;
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
      const bool on_device =
          weights_->Find(job.gate) && weights_->Find(job.up) && weights_->Find(job.down);
      if (on_device) {
        RunExpertHere(job, in);
      } else {
        RunExpertOnCpu(job, in);
      }
    }
  }

  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    Bind();
    const float* w = Weights(weight);
    if (w != nullptr) Note(cuda::RmsNorm(x, w, n, dim, eps, y, stream_));
  }

  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& rope) override {
    Bind();
    const int32_t* pos = Upload(kPositions, positions, n);
    if (pos != nullptr) Note(cuda::Rope(x, n, n_heads, head_dim, pos, rope, stream_));
  }

  void StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
               const KvLayerView& kv) override {
    Bind();
    cuda::DeviceKv dkv;
    const int32_t* pos = Upload(kPositions, positions, n);
    if (pos == nullptr || !DeviceKvOf(kv, positions, n, &dkv)) return;
    Note(cuda::StoreKv(k, v, n, pos, dkv, stream_));
  }

  void Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                 const KvLayerView& kv, float* out, const AttentionOptions& options) override {
    Bind();
    cuda::DeviceKv dkv;
    const int32_t* pos = Upload(kPositions, positions, n);
    if (pos == nullptr || !DeviceKvOf(kv, positions, n, &dkv)) return;
    const float* sinks = nullptr;
    if (options.sinks != nullptr && (sinks = Weights(options.sinks)) == nullptr) return;
    Note(cuda::Attention(q, n, n_heads, pos, dkv, out, options.scale, options.window, sinks,
                         stream_));
  }

  void Axpy(float a, const float* x, int64_t count, float* y) override {
    Bind();
    Note(cuda::Axpy(a, x, count, y, stream_));
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

  void AddBias(float* x, const float* bias, int64_t n, int64_t dim) override {
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
  enum Role { kPositions, kIds, kRows, kSources, kWeights, kBlocks, kRoles };

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

  // An expert whose weights stayed in host memory: its rows over to the CPU backend and back.
  void RunExpertOnCpu(const ExpertJob& job, const float* in) {
    const int64_t d = job.gate.cols, m = job.m, out = job.down.rows;
    host_in_.resize(m * d);
    host_out_.resize(m * out);
    CopyToHost(in, host_in_.size() * sizeof(float), host_in_.data());
    ExpertJob cpu_job = job;
    cpu_job.in = host_in_.data();
    cpu_job.rows = nullptr;
    cpu_job.out = host_out_.data();
    cpu_->RunExperts({&cpu_job, 1});
    CopyFromHost(host_out_.data(), host_out_.size() * sizeof(float), job.out);
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
  Scratch q8_, gemm_w_, gemm_x_;
  Scratch meta_[kRoles];
  BackendBuffer<float> gathered_, gate_, up_;
  std::vector<float> host_in_, host_out_;
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
