// The one scan the sampler makes over a whole vocabulary's logits: where the next value above a
// threshold is. Greedy decoding and top-k selection both reduce to it (each improvement of the
// best so far, or of the k-th best, starts a new scan from there), so a vocabulary of 32k-200k
// logits is read once, 16 or 8 at a time, instead of sorted or compared one by one.
#pragma once

#include <cstdint>

namespace moe {

// The first i in [from, n) with x[i] > t, or n when there is none. NaN is above nothing.
// Runs the widest vector code the CPU has (cpu_features.h, MOE_SIMD caps it).
int64_t FirstAbove(const float* x, int64_t from, int64_t n, float t);

}  // namespace moe
