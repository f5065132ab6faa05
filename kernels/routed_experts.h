// Launchers of the routed-expert kernels (routed_experts.cu): a step's routed experts run by the
// expert ids the router left in device memory (kernels/route.h), so a decode step never waits
// for the host to learn its experts. One product per choice (token x slot), each reading its
// expert's rows: for decode-sized steps (the CUDA backend sends larger ones to per-expert
// products). Plain C++; errors come back as text (empty: success).
#pragma once

#include <cstdint>
#include <string>

#include "lib/backend/cpu/q8_activations.h"
#include "lib/backend/routed_matvec_core.h"

namespace moe::cuda {

// For each of `choices` choices c with ids[c] >= 0: y[c, r] = matrix `which` of expert ids[c]
// (table: RoutedExpert by id, device memory), row r (of rows, each of cols values), times input
// row c / div, plus the row's bias; 0 for an empty choice (-1). The input rows are xf ([.. x
// cols] floats, for F32 matrices) and their 8-bit blocks x1 and x8 (one scale per block, per 8
// blocks; null where no matrix of the table needs them). RoutedRowPart's arithmetic, lanes by
// RoutedLanes(cols). Queued on `stream` (a cudaStream_t) without waiting: the error returned is
// the launch's.
std::string RoutedMatVec(const RoutedExpert* table, RoutedMatrixIndex which, const int32_t* ids,
                         int64_t choices, int64_t div, const float* xf, const Q8Block* x1,
                         const Q8Block* x8, float* y, int64_t rows, int64_t cols, void* stream);

// x[t] += sum over j < k of w[t, j] * outs[t * k + j] (skipping ids of -1), then, with
// shared_out, + g_t * shared_out[t] where g_t is the sigmoid of shared_gate[t] (1 without it):
// Backend::RunRoutedExperts' combine, summed as combine_core.h sums. All device memory; queued
// on `stream` without waiting.
std::string AddRoutedRows(int64_t n, int64_t k, int64_t dim, const int32_t* ids, const float* w,
                          const float* outs, const float* shared_out, const float* shared_gate,
                          float* x, void* stream);

}  // namespace moe::cuda
