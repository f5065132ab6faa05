// A GGUF file's tensor as a TensorSpec of its exact bytes, for tests that rewrite fixture files
// (GgufTensorInfo::data runs to the end of the file: the reader sizes only the types it knows).
#pragma once

#include "absl/status/statusor.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_file.h"
#include "lib/model/model_spec.h"

namespace moe::testing {

inline absl::StatusOr<TensorSpec> FileTensor(const GgufTensorInfo& info) {
  TensorSpec t;
  t.name = info.name;
  MOE_ASSIGN_OR_RETURN(t.dtype, DTypeFromGgml(info.ggml_type, info.name));
  t.shape.assign(info.ne.rbegin(), info.ne.rend());
  if (info.data.size() < t.byte_size()) return absl::DataLossError(info.name + " is cut short");
  t.data = info.data.subspan(0, t.byte_size());
  return t;
}

}  // namespace moe::testing
