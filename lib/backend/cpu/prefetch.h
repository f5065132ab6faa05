// Software prefetch of the weights a kernel reads next. A prompt tile computes on each weight
// byte for several tokens, and the hardware prefetcher alone left a core waiting on the weights
// of an expert no recent token had read: ~7 GB/s a core, about half the kernel's pace (measured
// with Q8_0 groups: cold weights 105 GMAC/s a core, 168 with this, 182 warm). One token per
// byte (decode) is bandwidth-bound already: there the requests gained nothing, and with two
// tokens they cost ~8 %.
#pragma once

#include <cstdint>

namespace moe::kernels {

// Below this many tokens a kernel leaves prefetching to the hardware.
inline constexpr int64_t kPrefetchTokens = 4;

// Asks for the cache lines of [p, p + bytes) in L2 (locality 2: prefetcht1).
inline void PrefetchToL2(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

}  // namespace moe::kernels
