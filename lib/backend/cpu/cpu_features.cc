#include "lib/backend/cpu/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

namespace moe {
namespace {

std::atomic<int> g_override{-1};

SimdLevel FromEnv(SimdLevel detected) {
  const char* env = std::getenv("MOE_SIMD");
  if (env == nullptr) return detected;
  std::string v(env);
  SimdLevel want = v == "scalar"   ? SimdLevel::kScalar
                   : v == "avx2"   ? SimdLevel::kAvx2
                   : v == "avx512" ? SimdLevel::kAvx512
                                   : SimdLevel::kAvx512Vnni;
  return std::min(want, detected);
}

}  // namespace

SimdLevel DetectedSimdLevel() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      return __builtin_cpu_supports("avx512vnni") ? SimdLevel::kAvx512Vnni : SimdLevel::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c()) {
      return SimdLevel::kAvx2;
    }
    return SimdLevel::kScalar;
  }();
  return level;
}

bool CpuHasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

SimdLevel ActiveSimdLevel() {
  int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<SimdLevel>(o);
  static const SimdLevel level = FromEnv(DetectedSimdLevel());
  return level;
}

SimdLevel SetSimdLevelForTesting(SimdLevel level) {
  SimdLevel l = std::min(level, DetectedSimdLevel());
  g_override.store(static_cast<int>(l));
  return l;
}

absl::string_view CpuSimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx512Vnni:
      return "avx512vnni";
  }
  return "unknown";
}

}  // namespace moe
