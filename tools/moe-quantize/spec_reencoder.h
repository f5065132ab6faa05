// Re-encodes a model description's tensors, each in the type a function chooses, for writing
// as .moe (where every routed expert may have a type of its own).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/backend/weight_view.h"
#include "lib/base/thread_pool.h"
#include "lib/model/model_spec.h"

namespace moe {

// Whether rows of `cols` values can be encoded as `type` (whole blocks); the error says why not.
absl::Status CheckEncodable(DType type, int64_t cols);

// The matrix's values re-encoded as `type`, row by row (rows of any layout, row groups too), the
// rows spread over `pool`'s threads when there is one (the 2- and 3-bit encoders search for each
// group's scale, so a large model takes minutes on one core).
absl::StatusOr<std::vector<uint8_t>> EncodeMatrix(const WeightView& w, DType type,
                                                  ThreadPool* pool = nullptr);
// The same into `out`, which holds exactly the encoded rows.
absl::Status EncodeMatrixInto(const WeightView& w, DType type, absl::Span<uint8_t> out,
                              ThreadPool* pool = nullptr);

// The spec with every tensor re-encoded as type_of(tensor) (a tensor already of that type is
// shared, not copied). The re-encoded tensors are deferred (TensorSpec::produce): each is made
// as the result is written (or materialized), so re-quantizing a model takes memory for one
// tensor, not for the model; `spec`'s deferred tensors are made on the way. `pool` must outlive
// that. Types whose blocks do not fit a tensor's rows are refused here.
absl::StatusOr<ModelSpec> ReencodeSpec(const ModelSpec& spec,
                                       const std::function<DType(const TensorSpec&)>& type_of,
                                       ThreadPool* pool = nullptr);

// The name a quantization scheme (lib/import/quant_scheme.h) knows a tensor by: GGUF's, where
// routed experts are stacked (blk.L.ffn_gate.E.weight is blk.L.ffn_gate_exps.weight).
std::string SchemeTensorName(const TensorSpec& t);

// The type a uniform scheme gives the tensor, as moe-quantize gives it in a GGUF file.
DType SchemeTypeFor(const std::string& scheme, const TensorSpec& t, int64_t n_layer);

}  // namespace moe
