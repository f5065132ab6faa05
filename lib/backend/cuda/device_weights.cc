#include "lib/backend/cuda/device_weights.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/backend/cuda/cuda_module.h"
#include "lib/backend/device_split.h"
#include "lib/base/half.h"

namespace moe::cuda {
namespace {

absl::Status CudaStatus(const char* what, cudaError_t e) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

std::vector<float> Widen(const HostTensor& t) {
  const size_t n = static_cast<size_t>(t.rows * t.cols);
  std::vector<float> out(n);
  const auto* h = reinterpret_cast<const uint16_t*>(t.data);
  for (size_t i = 0; i < n; ++i) {
    out[i] = t.dtype == DType::kF16 ? HalfToFloat(h[i]) : Bf16ToFloat(h[i]);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CudaWeights>> CudaWeights::Upload(
    absl::Span<const HostTensor> tensors, const DeviceWeightsOptions& options) {
  if (absl::Status s = ModuleAvailable(); !s.ok()) return s;
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    return CudaStatus("selecting the CUDA device", e);
  }
  std::shared_ptr<CudaWeights> w(new CudaWeights());
  w->device_ = options.device;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, options.device) == cudaSuccess)
    w->info_.device_name = prop.name;
  size_t budget = options.budget_bytes;
  if (budget == 0) {
    size_t free_bytes = 0, total = 0;
    if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total); e != cudaSuccess) {
      return CudaStatus("reading the device's free memory", e);
    }
    const size_t reserve = std::max<size_t>(size_t{1} << 30, total / 10);
    budget = free_bytes > reserve ? free_bytes - reserve : 0;
  }
  for (const HostTensor& t : tensors) {
    if (IsRuntimeLayout(t.dtype)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "a tensor is stored as ", DTypeName(t.dtype),
          ", a row layout of the CPU kernels: load the model without re-laying its rows for the "
          "GPU (LoadOptions::repack = false; the runtime does so when a device is asked for)"));
    }
  }
  absl::StatusOr<DeviceSplit> split = SplitForDevice(tensors, budget);
  if (!split.ok()) return split.status();
  w->info_.expert_matrices_on_device = split->expert_matrices_on_device;
  w->info_.expert_matrices_on_host = split->expert_matrices_on_host;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!split->on_device[i]) continue;
    const HostTensor& t = tensors[i];
    const size_t bytes = DeviceBytes(t);
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
      return CudaStatus("allocating device memory for the weights", e);
    }
    Entry entry{t.data,
                t.bytes,
                static_cast<uint8_t*>(p),
                RowBytes(t.dtype, t.cols),
                0,
                t.dtype,
                WidenedOnDevice(t.dtype) ? DType::kF32 : t.dtype};
    entry.device_row_bytes = RowBytes(entry.device_dtype, t.cols);
    w->entries_.push_back(entry);  // freed by the destructor from here on
    cudaError_t e = cudaSuccess;
    if (WidenedOnDevice(t.dtype)) {
      const std::vector<float> wide = Widen(t);
      e = cudaMemcpy(p, wide.data(), bytes, cudaMemcpyHostToDevice);
    } else {
      e = cudaMemcpy(p, t.data, bytes, cudaMemcpyHostToDevice);
    }
    if (e != cudaSuccess) return CudaStatus("copying the weights to the device", e);
  }
  w->info_.bytes = split->bytes;
  std::sort(w->entries_.begin(), w->entries_.end(),
            [](const Entry& a, const Entry& b) { return a.host < b.host; });
  return std::shared_ptr<const CudaWeights>(std::move(w));
}

CudaWeights::~CudaWeights() {
  for (const Entry& e : entries_) cudaFree(e.device);
}

const CudaWeights::Entry* CudaWeights::EntryOf(const uint8_t* host) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), host,
                             [](const uint8_t* p, const Entry& e) { return p < e.host; });
  if (it == entries_.begin()) return nullptr;
  --it;
  return host < it->host + it->host_bytes ? &*it : nullptr;
}

std::optional<WeightView> CudaWeights::Find(const WeightView& w) const {
  const Entry* e = EntryOf(w.data);
  if (e == nullptr || w.dtype != e->host_dtype) return std::nullopt;
  const size_t offset = static_cast<size_t>(w.data - e->host);
  if (offset % e->host_row_bytes != 0 || offset + w.byte_size() > e->host_bytes) {
    return std::nullopt;  // not whole rows of this tensor
  }
  WeightView d = w;
  d.dtype = e->device_dtype;
  d.data = e->device + offset / e->host_row_bytes * e->device_row_bytes;
  return d;
}

const float* CudaWeights::Find(const float* host) const {
  const auto* p = reinterpret_cast<const uint8_t*>(host);
  const Entry* e = EntryOf(p);
  if (e == nullptr || e->host_dtype != DType::kF32) return nullptr;
  return reinterpret_cast<const float*>(e->device + (p - e->host));
}

}  // namespace moe::cuda
