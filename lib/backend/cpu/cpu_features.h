// Run-time SIMD level: what the CPU offers, optionally capped by MOE_SIMD (scalar | avx2 |
// avxvnni | avx512 | avx512vnni) so every kernel path can be tested on one machine.
#pragma once

#include "absl/strings/string_view.h"

namespace moe {

// Each level runs the kernels of the ones below it where it has none of its own. kAvxVnni is
// AVX2 with the 256-bit VEX vpdpbusd (AVX-VNNI: Intel Alder Lake and later client CPUs, which
// have no AVX-512, and AMD Zen 5 on): the integer group kernels use it in place of
// vpmaddubsw + vpmaddwd. It is not implied by the levels above it (Skylake-X has AVX-512 and no
// AVX-VNNI): CpuSupportsLevel says whether this CPU can run a level.
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3, kAvx512Vnni = 4 };

SimdLevel DetectedSimdLevel();
// Whether the CPU converts halves in hardware (F16C), asked of cpuid directly: clang's
// __builtin_cpu_supports does not know the feature.
bool CpuHasF16c();
// Whether the CPU has AVX-VNNI (cpuid leaf 7, sub-leaf 1, eax bit 4).
bool CpuHasAvxVnni();
// Whether this CPU can run the kernels of a level.
bool CpuSupportsLevel(SimdLevel level);
// min(detected, MOE_SIMD) unless overridden for testing (kAvxVnni: kAvx2 on a CPU without it).
SimdLevel ActiveSimdLevel();
// Forces a level (capped at what the CPU has, as ActiveSimdLevel caps); returns the level in
// force.
SimdLevel SetSimdLevelForTesting(SimdLevel level);
absl::string_view CpuSimdLevelName(SimdLevel level);

}  // namespace moe
