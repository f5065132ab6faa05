// Launchers of the CUDA KV cache store (store_kv.cu): a step's new key and value rows written
// into an F32, F16 or Q8_0 cache, contiguous or paged, as the CPU backend's StoreKv writes them.
// Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/attention.h"

namespace moe::cuda {

// Rows t < n of k and v (n_kv_heads x head_dim floats each) into the cache at positions[t].
// Everything in device memory; queued on `stream` (a cudaStream_t; null: the default stream)
// without waiting: the error returned is the launch's.
std::string StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
                    const DeviceKv& kv, void* stream);

// The same from and to host memory: kv.k / kv.v point at k_bytes / v_bytes of host cache, which
// is copied over, written and copied back; kv.paging.blocks (if set) at n_blocks host entries.
// For the GPU tests.
std::string StoreKvFromHost(const float* k, const float* v, int64_t n, const int32_t* positions,
                            const DeviceKv& kv, size_t k_bytes, size_t v_bytes, int64_t n_blocks);

}  // namespace moe::cuda
