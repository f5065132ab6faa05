// The one numeric core (issue 21): functions that the CPU backend and the CUDA kernels share are
// marked MOE_HOST_DEVICE, which is __host__ __device__ under nvcc and nothing otherwise, so the
// quantized math the GPU runs is the math the CPU tests check.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MOE_HOST_DEVICE __host__ __device__
#else
#define MOE_HOST_DEVICE
#endif

namespace moe {

MOE_HOST_DEVICE inline float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

MOE_HOST_DEVICE inline float LoadF32(const uint8_t* p) {  // little-endian, any alignment
  return FloatFromBits(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                       static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
}

MOE_HOST_DEVICE inline uint16_t LoadU16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);  // little-endian, any alignment
}

}  // namespace moe
