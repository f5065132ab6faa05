// Launchers of the CUDA weighted combine (combine.cu): the experts' outputs, weighted by the
// router, added to the residual stream as Backend::AddWeightedRows does on the CPU
// (lib/backend/combine_core.h). Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstdint>
#include <string>

namespace moe::cuda {

// x[t] += sum over j < k of w[t * k + j] * src[t * k + j][0..dim), for t < n; src is an array of
// n x k device pointers (null: skipped), itself in device memory, as are w and x. Queued on
// `stream` (a cudaStream_t; null: the default stream) without waiting: the error returned is
// the launch's.
std::string AddWeightedRows(int64_t n, int64_t k, int64_t dim, const float* const* src,
                            const float* w, float* x, void* stream);

// The same from and to host memory: src[t * k + j] are host rows of dim floats (or null), copied
// over with w and x, and x back; then waits. For the GPU tests.
std::string AddWeightedRowsFromHost(int64_t n, int64_t k, int64_t dim, const float* const* src,
                                    const float* w, float* x);

}  // namespace moe::cuda
