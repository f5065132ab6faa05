// Products of a 16-row group (the row-group layouts of repack.h) with tokens' Q8 activations:
// every weight byte is loaded once per group and block, then used for up to eight tokens, so
// the same kernel serves decode (one token) and prompt batches (many).
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/q8_activations.h"
#include "lib/base/dtype.h"

namespace moe {

// y[t * ldy + i] = row i of the group . token t, for i < 16 and t < n; token t's activation
// blocks are x[t * cols / 32 ...], and for activations with a scale per super-block, xs[t * cols
// / 256 ...] their split sums (null otherwise). `next` is the group the caller computes next
// (nullptr if none): a kernel may fetch it into the cache meanwhile.
using GroupProductsFn = void (*)(const uint8_t* group, int64_t cols, const Q8Block* x,
                                 const SplitSums* xs, int64_t n, float* y, int64_t ldy,
                                 const uint8_t* next);

// The kernel for a row-group type at a level, for activations with `scales`; below AVX-512
// VNNI, a portable one that unpacks each row and uses the level's row kernel. A kernel for
// kPerBlock is right for activations of either kind; one for kPerSuperBlock needs the blocks of
// each super-block to share their scale, and their split sums.
GroupProductsFn GetGroupProducts(DType t, SimdLevel level,
                                 ActivationScales scales = ActivationScales::kPerBlock);

namespace kernels {
GroupProductsFn Avx512VnniGroupProducts(DType t, ActivationScales scales);
GroupProductsFn Avx2GroupProducts(DType t);
// The AVX2 kernels with AVX-VNNI's vpdpbusd for the byte products (the same integer sums).
GroupProductsFn AvxVnniGroupProducts(DType t);
}  // namespace kernels

}  // namespace moe
