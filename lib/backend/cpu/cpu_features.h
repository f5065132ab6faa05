// Run-time SIMD level: what the CPU offers, optionally capped by MOE_SIMD (scalar | avx2 |
// avx512 | avx512vnni) so every kernel path can be tested on one machine.
#pragma once

#include "absl/strings/string_view.h"

namespace moe {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3 };

SimdLevel DetectedSimdLevel();
// Whether the CPU converts halves in hardware (F16C), asked of cpuid directly: clang's
// __builtin_cpu_supports does not know the feature.
bool CpuHasF16c();
// min(detected, MOE_SIMD) unless overridden for testing.
SimdLevel ActiveSimdLevel();
// Forces a level (capped at what the CPU has); returns the level in force.
SimdLevel SetSimdLevelForTesting(SimdLevel level);
absl::string_view CpuSimdLevelName(SimdLevel level);

}  // namespace moe
