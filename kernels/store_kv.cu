// The KV cache store on the GPU: one thread per (token, value) for F32 and F16 caches (halves by
// the CPU's FloatToHalf, which rounds as F16C does), one per (token, 32-value block) for Q8_0 by
// the CPU's EncodeQ8_0Block (lib/backend/block_encode.h): the CPU's cache bytes exactly.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/device_kv_buffers.h"
#include "kernels/store_kv.h"
#include "lib/backend/block_encode.h"
#include "lib/backend/kv_core.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void StoreKvKernel(const float* k, const float* v, int64_t n, const int32_t* positions,
                              DeviceKv kv, int64_t unit) {
  const int64_t row = kv.n_kv_heads * kv.head_dim, per_row = row / unit;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= 2 * n * per_row) return;
  const bool is_v = index >= n * per_row;
  const int64_t rest = is_v ? index - n * per_row : index;
  const int64_t t = rest / per_row, u = rest % per_row;
  const float* src = (is_v ? v : k) + t * row + u * unit;
  uint8_t* base = is_v ? kv.v : kv.k;
  // Unit u lies in KV head h (a unit never straddles two: head_dim is a multiple of it).
  const int64_t h = u * unit / kv.head_dim;
  uint8_t* dst = base +
                 kv.paging.HeadRowOffset(positions[t], h, KvValuesBytes(kv.dtype, kv.head_dim),
                                         kv.n_kv_heads) +
                 KvValuesBytes(kv.dtype, u * unit - h * kv.head_dim);
  switch (kv.dtype) {
    case DType::kF32: {
      uint32_t bits;
      memcpy(&bits, src, 4);
      for (int b = 0; b < 4; ++b) dst[b] = static_cast<uint8_t>(bits >> (8 * b));
      break;
    }
    case DType::kF16: {
      const uint16_t h = FloatToHalf(*src);
      dst[0] = static_cast<uint8_t>(h & 0xff);
      dst[1] = static_cast<uint8_t>(h >> 8);
      break;
    }
    default:
      EncodeQ8_0Block(src, dst);
  }
}

std::string CheckStore(int64_t n, const DeviceKv& kv) {
  if (n < 0 || kv.n_kv_heads < 1 || kv.head_dim < 1) return "bad KV shape";
  return CheckKvType(kv);
}

}  // namespace

std::string StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
                    const DeviceKv& kv, void* stream) {
  if (std::string e = CheckStore(n, kv); !e.empty()) return e;
  const int64_t unit = kv.dtype == DType::kQ8_0 ? 32 : 1;
  const int64_t work = 2 * n * (kv.n_kv_heads * kv.head_dim / unit);
  if (work == 0) return {};
  const int64_t grid = (work + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many rows for one launch";
  StoreKvKernel<<<static_cast<unsigned>(grid), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      k, v, n, positions, kv, unit);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string StoreKvFromHost(const float* k, const float* v, int64_t n, const int32_t* positions,
                            const DeviceKv& kv, size_t k_bytes, size_t v_bytes, int64_t n_blocks) {
  if (std::string e = CheckStore(n, kv); !e.empty()) return e;
  if (n == 0) return {};
  const size_t rows_bytes = static_cast<size_t>(n * kv.n_kv_heads * kv.head_dim) * sizeof(float);
  DeviceBuffer dk, dv, dpos;
  DeviceKvBuffers cache;
  if (std::string e = dk.CopyIn(k, rows_bytes); !e.empty()) return e;
  if (std::string e = dv.CopyIn(v, rows_bytes); !e.empty()) return e;
  if (std::string e = dpos.CopyIn(positions, static_cast<size_t>(n) * sizeof(int32_t));
      !e.empty()) {
    return e;
  }
  if (std::string e = cache.CopyIn(kv, k_bytes, v_bytes, n_blocks); !e.empty()) return e;
  if (std::string e = StoreKv(static_cast<const float*>(dk.p), static_cast<const float*>(dv.p), n,
                              static_cast<const int32_t*>(dpos.p), cache.kv, nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  if (std::string e = cache.k.CopyOut(kv.k, k_bytes); !e.empty()) return e;
  return cache.v.CopyOut(kv.v, v_bytes);
}

}  // namespace moe::cuda
