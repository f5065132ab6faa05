// Per-expert mixed precision: how much each routed expert's output suffers under each weight
// type, measured on calibration activations, and the cheapest-error choice of types within a
// byte budget. Experts are independent units in a .moe, so each may have its own type; what
// matters is the error a token sees, so an expert's error counts as often as it is routed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/base/dtype.h"
#include "lib/model/model.h"

namespace moe {

// What the experts of each layer took as input on a calibration text: a sample of their routed
// tokens' rows (the normalised residual stream) with the router's weights, and how many tokens
// chose each expert in all.
struct ExpertSamples {
  std::vector<float> inputs;   // [m x n_embd]
  std::vector<float> weights;  // [m]
  int64_t routed = 0;          // tokens that chose the expert (m of them are kept)
};
struct Calibration {
  int64_t tokens = 0;
  std::vector<std::vector<ExpertSamples>> experts;  // [layer][expert]; empty for dense layers
};

// Runs the model over `tokens` in windows of `window`, keeping at most max_rows routed rows per
// expert (a reservoir sample, seeded: the same text gives the same sample).
absl::StatusOr<Calibration> Calibrate(std::shared_ptr<const Model> model,
                                      absl::Span<const int32_t> tokens, int64_t window,
                                      int64_t max_rows, int threads);

struct TypeOption {
  DType type;
  size_t bytes = 0;  // the expert's three matrices in this type
  double error = 0;  // expected squared output error, summed over the tokens that choose it
};

// For every routed expert and each candidate type its rows fit: the weighted squared difference
// between its output with the type and with the model's own weights, over its calibration rows,
// scaled to all its routed tokens (or to routed_counts[layer][expert] when given: a routing
// profile's counts). Experts no calibration token chose take their layer's mean error per row.
// Candidates a matrix's rows do not fit are left out; none fitting is an error.
absl::StatusOr<std::vector<std::vector<std::vector<TypeOption>>>> MeasureSensitivity(
    const Model& model, const Calibration& calibration, absl::Span<const DType> candidates,
    const std::vector<std::vector<int64_t>>* routed_counts, Backend& backend);

// One option per expert, minimising the summed error with the summed bytes within budget_bytes
// (greedy along each expert's lower convex hull of (bytes, error), steepest error drop per byte
// first). [layer][expert] -> index into its options (-1 for layers without experts). An error
// naming the smallest possible size when even the cheapest choice does not fit.
absl::StatusOr<std::vector<std::vector<int>>> ChooseTypes(
    const std::vector<std::vector<std::vector<TypeOption>>>& options, size_t budget_bytes);

}  // namespace moe
