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
  SimdLevel want = v == "scalar"    ? SimdLevel::kScalar
                   : v == "avx2"    ? SimdLevel::kAvx2
                   : v == "avxvnni" ? SimdLevel::kAvxVnni
                   : v == "avx512"  ? SimdLevel::kAvx512
                                    : SimdLevel::kAvx512Vnni;
  return std::min(want, detected);
}

// A level capped below the detected one may name a feature the CPU lacks (AVX-VNNI under
// AVX-512): the level below it then.
SimdLevel Runnable(SimdLevel level) { return CpuSupportsLevel(level) ? level : SimdLevel::kAvx2; }

}  // namespace

SimdLevel DetectedSimdLevel() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      return __builtin_cpu_supports("avx512vnni") ? SimdLevel::kAvx512Vnni : SimdLevel::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c()) {
      return CpuHasAvxVnni() ? SimdLevel::kAvxVnni : SimdLevel::kAvx2;
    }
    return SimdLevel::kScalar;
  }();
  return level;
}

bool CpuHasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

bool CpuHasAvxVnni() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4)) != 0;
}

bool CpuSupportsLevel(SimdLevel level) {
  return level <= DetectedSimdLevel() && (level != SimdLevel::kAvxVnni || CpuHasAvxVnni());
}

SimdLevel ActiveSimdLevel() {
  int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<SimdLevel>(o);
  static const SimdLevel level = Runnable(FromEnv(DetectedSimdLevel()));
  return level;
}

SimdLevel SetSimdLevelForTesting(SimdLevel level) {
  SimdLevel l = Runnable(std::min(level, DetectedSimdLevel()));
  g_override.store(static_cast<int>(l));
  return l;
}

absl::string_view CpuSimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvxVnni:
      return "avxvnni";
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx512Vnni:
      return "avx512vnni";
  }
  return "unknown";
}

}  // namespace moe
