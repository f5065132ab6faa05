// Attention over the KV cache on the GPU: one thread block per (token, query head). The block
// walks the attended positions in chunks of its threads: each thread scores one position
// (q . k, keys read by kv_core.h's KvValueAt at the paged row offset), the chunk's maximum and
// exponentials update a running maximum and sum (online softmax; a sink starts the sum at its own
// logit), and each thread accumulates its share of the head's output dimensions over the chunk's
// values. A reference kernel: correct for every cache type, layout, window and head size up to
// 512; not yet tuned (no tensor cores, no split over the context).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda_buffer.h"
#include "kernels/device_kv_buffers.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kDimsPerThread = kMaxAttentionHeadDim / kThreads;

// The block's maximum (op 0) or sum (op 1) of v; every thread gets it.
__device__ float BlockReduce(float v, int op, float* scratch) {
  for (int o = 16; o > 0; o /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = op == 0 ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch is free again
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) r = op == 0 ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

__global__ void AttentionKernel(const float* q, int64_t n_heads, const int32_t* positions,
                                DeviceKv kv, float* out, float scale, int64_t window, bool chunked,
                                const float* sinks) {
  __shared__ float q_sh[kMaxAttentionHeadDim];
  __shared__ float e_sh[kThreads];
  __shared__ float reduce[kThreads / 32];
  const int64_t h = blockIdx.x, t = blockIdx.y, hd = kv.head_dim;
  const int64_t kvh = h / (n_heads / kv.n_kv_heads);
  const int64_t head_bytes = KvValuesBytes(kv.dtype, hd);
  const int64_t row_bytes = kv.paging.HeadRowBytes(head_bytes, kv.n_kv_heads);
  const int64_t head_offset = kv.paging.HeadStart(kvh, head_bytes);
  const float* qh = q + (t * n_heads + h) * hd;
  for (int64_t i = threadIdx.x; i < hd; i += kThreads) q_sh[i] = qh[i];
  __syncthreads();
  const KvSpan span = AttendedSpan(positions[t], window, chunked);
  float m = sinks != nullptr ? sinks[h] : -INFINITY;
  float l = sinks != nullptr ? 1.f : 0.f;  // the sink's exp(sink - m), m = sink
  float acc[kDimsPerThread] = {};
  for (int64_t c0 = span.first; c0 < span.end; c0 += kThreads) {
    const int64_t p = c0 + threadIdx.x;
    float s = -INFINITY;
    if (p < span.end) {
      const uint8_t* krow = kv.k + kv.paging.RowOffset(p, row_bytes) + head_offset;
      float dot = 0.f;
      for (int64_t i = 0; i < hd; ++i) dot += q_sh[i] * KvValueAt(kv.dtype, krow, i);
      s = dot * scale;
    }
    const float new_m = fmaxf(m, BlockReduce(s, 0, reduce));
    const float e = p < span.end ? expf(s - new_m) : 0.f;
    e_sh[threadIdx.x] = e;
    const float chunk_sum = BlockReduce(e, 1, reduce);  // its barriers publish e_sh too
    const float correction = expf(m - new_m);           // 0 while m is still -inf
    l = l * correction + chunk_sum;
    const int64_t chunk = span.end - c0 < kThreads ? span.end - c0 : kThreads;
    for (int d = 0; d < kDimsPerThread; ++d) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(d) * kThreads;
      if (i >= hd) break;
      float a = acc[d] * correction;
      for (int64_t j = 0; j < chunk; ++j) {
        const uint8_t* vrow = kv.v + kv.paging.RowOffset(c0 + j, row_bytes) + head_offset;
        a += e_sh[j] * KvValueAt(kv.dtype, vrow, i);
      }
      acc[d] = a;
    }
    m = new_m;
    __syncthreads();  // e_sh is read by every thread before the next chunk writes it
  }
  float* oh = out + (t * n_heads + h) * hd;
  for (int d = 0; d < kDimsPerThread; ++d) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(d) * kThreads;
    if (i < hd) oh[i] = acc[d] / l;
  }
}

std::string CheckAttention(int64_t n, int64_t n_heads, const DeviceKv& kv) {
  if (n < 0 || n_heads < 1 || kv.n_kv_heads < 1 || n_heads % kv.n_kv_heads != 0) {
    return "query heads must be a multiple of the KV heads";
  }
  if (kv.head_dim < 1 || kv.head_dim > kMaxAttentionHeadDim) return "head size out of range";
  if (std::string e = CheckKvType(kv); !e.empty()) return e;
  if (n > 65535) return "too many tokens for one launch";
  return {};
}

}  // namespace

std::string Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                      const DeviceKv& kv, float* out, float scale, int64_t window, bool chunked,
                      const float* sinks, void* stream) {
  if (std::string e = CheckAttention(n, n_heads, kv); !e.empty()) return e;
  if (n == 0) return {};
  if (scale == 0.f) scale = 1.0f / std::sqrt(static_cast<float>(kv.head_dim));
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n));
  AttentionKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      q, n_heads, positions, kv, out, scale, window, chunked, sinks);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string AttentionFromHost(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                              const DeviceKv& kv, size_t k_bytes, size_t v_bytes, int64_t n_blocks,
                              float* out, float scale, int64_t window, bool chunked,
                              const float* sinks) {
  if (std::string e = CheckAttention(n, n_heads, kv); !e.empty()) return e;
  if (n == 0) return {};
  const size_t rows_bytes = static_cast<size_t>(n * n_heads * kv.head_dim) * sizeof(float);
  DeviceBuffer dq, dpos, dsinks, dout;
  DeviceKvBuffers cache;
  if (std::string e = dq.CopyIn(q, rows_bytes); !e.empty()) return e;
  if (std::string e = dpos.CopyIn(positions, static_cast<size_t>(n) * sizeof(int32_t));
      !e.empty()) {
    return e;
  }
  if (std::string e = cache.CopyIn(kv, k_bytes, v_bytes, n_blocks); !e.empty()) return e;
  if (sinks != nullptr) {
    if (std::string e = dsinks.CopyIn(sinks, static_cast<size_t>(n_heads) * sizeof(float));
        !e.empty()) {
      return e;
    }
  }
  if (std::string e = dout.Allocate(rows_bytes); !e.empty()) return e;
  if (std::string e =
          Attention(static_cast<const float*>(dq.p), n, n_heads,
                    static_cast<const int32_t*>(dpos.p), cache.kv, static_cast<float*>(dout.p),
                    scale, window, chunked, static_cast<const float*>(dsinks.p), nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  return dout.CopyOut(out, rows_bytes);
}

}  // namespace moe::cuda
