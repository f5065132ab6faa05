// The softmax's denominator over a whole vocabulary: sum_i e^((x_i - max) / T). The sampler
// needs it for top-p when it sorts only the tokens that can be drawn (exp_sum's callers), and a
// scalar exp per token of a 200k vocabulary would cost a millisecond a token.
#pragma once

#include <cstdint>

#include "lib/backend/cpu/cpu_features.h"

namespace moe {

// sum over i < n with x[i] <= ceiling of e^((x[i] - max) * inv_temperature): the terms in float
// (the vector exp's 2 ulp), summed in double. NaN is below no ceiling; -inf's term is 0.
using ExpSumFn = double (*)(const float* x, int64_t n, float max, float inv_temperature,
                            float ceiling);

ExpSumFn GetExpSum(SimdLevel level);

namespace kernels {
double ExpSumPortable(const float* x, int64_t n, float max, float inv_temperature, float ceiling);
double ExpSumAvx512(const float* x, int64_t n, float max, float inv_temperature, float ceiling);
double ExpSumAvx2(const float* x, int64_t n, float max, float inv_temperature, float ceiling);
}  // namespace kernels

}  // namespace moe
