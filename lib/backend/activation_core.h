// The gated feed-forward activations element by element, as the CPU's portable kernels and the
// CUDA kernel (kernels/gated_activation.cu) both compute them (issue 21's one numeric core). The
// CPU's vector kernels are held to these by their own tests.
#pragma once

#include <cmath>

#include "lib/base/host_device.h"

namespace moe {

// silu(gate) * up = gate / (1 + e^-gate) * up.
MOE_HOST_DEVICE inline float SiluMulElement(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

// gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai, alpha 1.702, limit 7):
// g' sigmoid(1.702 g') (u' + 1), g' = min(gate, 7), u' = clamp(up, -7, 7); a NaN passes through
// as std::min and std::clamp let it.
MOE_HOST_DEVICE inline float SwigluClampedElement(float gate, float up) {
  constexpr float kAlpha = 1.702f, kLimit = 7.f;
  const float g = kLimit < gate ? kLimit : gate;
  const float u = up < -kLimit ? -kLimit : (kLimit < up ? kLimit : up);
  return g / (1.f + expf(kAlpha * -g)) * (u + 1.f);
}

}  // namespace moe
