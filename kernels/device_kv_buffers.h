// A host KV cache copied to the device for the launchers' FromHost checks (attention, store):
// K, V and the block table, owned here, and the DeviceKv that points at them. CUDA code only.
#pragma once

#include <string>

#include "kernels/attention.h"
#include "kernels/cuda_buffer.h"

namespace moe::cuda {

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
