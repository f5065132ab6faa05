// SiLU x up and gpt-oss's clamped SwiGLU on the GPU, one thread per element, by the CPU's element
// functions (lib/backend/activation_core.h); only the device's expf can differ from the host's.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/gated_activation.h"
#include "lib/backend/activation_core.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void GatedActivationKernel(bool clamped, const float* gate, const float* up, float* out,
                                      int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = clamped ? SwigluClampedElement(gate[i], up[i]) : SiluMulElement(gate[i], up[i]);
}

}  // namespace

std::string GatedActivation(GatedActivationKind kind, const float* gate, const float* up,
                            float* out, int64_t n, void* stream) {
  if (n < 0) return "negative element count";
  if (n == 0) return {};
  const int64_t grid = (n + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many elements for one launch";
  GatedActivationKernel<<<static_cast<unsigned>(grid), kThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(
      kind == GatedActivationKind::kSwigluClamped, gate, up, out, n);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string GatedActivationFromHost(GatedActivationKind kind, const float* gate, const float* up,
                                    float* out, int64_t n) {
  if (n < 0) return "negative element count";
  if (n == 0) return {};
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  DeviceBuffer dg, du, dout;
  if (std::string e = dg.CopyIn(gate, bytes); !e.empty()) return e;
  if (std::string e = du.CopyIn(up, bytes); !e.empty()) return e;
  if (std::string e = dout.Allocate(bytes); !e.empty()) return e;
  if (std::string e =
          GatedActivation(kind, static_cast<const float*>(dg.p), static_cast<const float*>(du.p),
                          static_cast<float*>(dout.p), n, nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  return dout.CopyOut(out, bytes);
}

}  // namespace moe::cuda
