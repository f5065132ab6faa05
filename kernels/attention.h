// Launchers of the CUDA attention over the KV cache (attention.cu): grouped-query attention of
// query rows over an F32, F16 or Q8_0 cache, contiguous or paged, with sliding windows and sinks,
// for decode and prompts alike, reading keys and values by the CPU's core
// (lib/backend/kv_core.h). Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/backend/kv_core.h"
#include "lib/base/dtype_enum.h"

namespace moe::cuda {

// A layer's cache on the device (KvLayerView's fields; paging.blocks in device memory too).
struct DeviceKv {
  DType dtype = DType::kF16;  // F32, F16 or Q8_0 (head_dim a multiple of 32)
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // at most kMaxAttentionHeadDim
  KvPaging paging;
};

inline constexpr int64_t kMaxAttentionHeadDim = 512;

// out[t] (n_heads x head_dim) = attention of q[t] at positions[t] over positions
// AttendedSpan(positions[t], window, chunked) of the cache; query head h reads KV head h / (n_heads
// / n_kv_heads); scores times `scale` (0: 1 / sqrt(head_dim)); sinks: one logit per query head
// joining each softmax (null: none). One thread block per (token, head) with an online softmax
// over chunks of positions. Everything in device memory; queued on `stream` (a cudaStream_t;
// null: the default stream) without waiting: the error returned is the launch's.
std::string Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                      const DeviceKv& kv, float* out, float scale, int64_t window, bool chunked,
                      const float* sinks, void* stream);

// The same from and to host memory: kv.k / kv.v point at k_bytes / v_bytes of host cache and
// kv.paging.blocks (if set) at n_blocks host entries; sinks (if set) at n_heads host floats.
// Copied over, run, out copied back; then waits. For the GPU tests.
std::string AttentionFromHost(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                              const DeviceKv& kv, size_t k_bytes, size_t v_bytes, int64_t n_blocks,
                              float* out, float scale, int64_t window, bool chunked,
                              const float* sinks);

}  // namespace moe::cuda
