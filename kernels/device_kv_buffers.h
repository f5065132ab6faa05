// What the KV cache launchers (attention, store) share: the check of a cache's element type, and
// a host cache copied to the device for their FromHost checks (K, V and the block table, owned
// here, and the DeviceKv that points at them). CUDA code only.
#pragma once

#include <string>

#include "kernels/attention.h"
#include "kernels/cuda_buffer.h"
#include "lib/kv/kv_type.h"

namespace moe::cuda {

// Empty when the kernels can read and write kv's element type, otherwise why not: the KV caches'
// own rule (lib/kv/kv_type.h).
inline std::string CheckKvType(const DeviceKv& kv) {
  const absl::Status status = moe::CheckKvType(kv.dtype, kv.head_dim);
  return status.ok() ? std::string() : std::string(status.message());
}

struct DeviceKvBuffers {
  DeviceBuffer k, v, blocks;
  DeviceKv kv;  // the host cache's shape and paging, its pointers on the device

  // host.k / host.v: k_bytes / v_bytes of host cache; host.paging.blocks (if set): n_blocks
  // host entries.
  std::string CopyIn(const DeviceKv& host, size_t k_bytes, size_t v_bytes, int64_t n_blocks) {
    kv = host;
    if (std::string e = k.CopyIn(host.k, k_bytes); !e.empty()) return e;
    if (std::string e = v.CopyIn(host.v, v_bytes); !e.empty()) return e;
    kv.k = static_cast<uint8_t*>(k.p);
    kv.v = static_cast<uint8_t*>(v.p);
    if (host.paging.blocks != nullptr) {
      if (std::string e =
              blocks.CopyIn(host.paging.blocks, static_cast<size_t>(n_blocks) * sizeof(int32_t));
          !e.empty()) {
        return e;
      }
      kv.paging.blocks = static_cast<const int32_t*>(blocks.p);
    }
    return {};
  }
};

}  // namespace moe::cuda
