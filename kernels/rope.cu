// Rotary position encoding on the GPU: one thread per (token, head, pair), each pair's frequency,
// YaRN share and angle by the CPU's core (lib/backend/rope_core.h); only the device's cosf/sinf
// (and powf) can differ from the host's.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/rope.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RopeKernel(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                           const int32_t* positions, RopeParams rope, RopeCorrection corr) {
  const int64_t half = rope.n_rot / 2;
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= n * n_heads * half) return;
  const int64_t i = id % half, row = id / half;  // row = t * n_heads + h
  const int64_t t = row / n_heads;
  const float theta =
      RopeAngle(rope, positions[t], RopePairFrequency(rope, i), RopePairRamp(rope, corr, i));
  int64_t a, b;
  RopePairIndex(rope, i, &a, &b);
  RopeRotate(x + row * head_dim + rope.offset, a, b, cosf(theta) * rope.magnitude,
             sinf(theta) * rope.magnitude);
}

std::string CheckRope(int64_t n, int64_t n_heads, int64_t head_dim, const RopeParams& rope) {
  if (n < 0 || n_heads < 1 || head_dim < 1) return "bad rope shape";
  if (rope.n_rot < 2 || rope.n_rot % 2 != 0 || rope.offset < 0 ||
      rope.offset + rope.n_rot > head_dim) {
    return "rotated dimensions outside the head";
  }
  return {};
}

}  // namespace

std::string Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                 const RopeParams& rope, void* stream) {
  if (std::string e = CheckRope(n, n_heads, head_dim, rope); !e.empty()) return e;
  const int64_t pairs = n * n_heads * (rope.n_rot / 2);
  if (pairs == 0) return {};
  const int64_t grid = (pairs + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many rows for one launch";
  RopeKernel<<<static_cast<unsigned>(grid), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, n, n_heads, head_dim, positions, rope, RopeCorrectionOf(rope));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string RopeFromHost(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                         const int32_t* positions, const RopeParams& rope) {
  if (std::string e = CheckRope(n, n_heads, head_dim, rope); !e.empty()) return e;
  if (n == 0) return {};
  const size_t x_bytes = static_cast<size_t>(n * n_heads * head_dim) * sizeof(float);
  DeviceBuffer dx, dp, df;
  RopeParams on_device = rope;
  if (rope.freq_factors != nullptr) {
    if (std::string e = df.CopyIn(rope.freq_factors, (rope.n_rot / 2) * sizeof(float));
        !e.empty()) {
      return e;
    }
    on_device.freq_factors = static_cast<const float*>(df.p);
  }
  if (std::string e = dx.CopyIn(x, x_bytes); !e.empty()) return e;
  if (std::string e = dp.CopyIn(positions, static_cast<size_t>(n) * sizeof(int32_t)); !e.empty()) {
    return e;
  }
  if (std::string e = Rope(static_cast<float*>(dx.p), n, n_heads, head_dim,
                           static_cast<const int32_t*>(dp.p), on_device, nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  return dx.CopyOut(x, x_bytes);
}

}  // namespace moe::cuda
