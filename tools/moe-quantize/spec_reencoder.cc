#include "tools/moe-quantize/spec_reencoder.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/status_macros.h"
#include "lib/import/quant_scheme.h"

namespace moe {

absl::Status CheckEncodable(DType type, int64_t cols) {
  if (RowSizeValid(type, cols)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("rows of ", cols, " values do not fit ", DTypeName(type), " blocks"));
}

absl::Status EncodeMatrixInto(const WeightView& w, DType type, absl::Span<uint8_t> out,
                              ThreadPool* pool) {
  MOE_RETURN_IF_ERROR(CheckEncodable(type, w.cols));
  const size_t out_row = RowBytes(type, w.cols);
  if (out.size() != out_row * w.rows) {
    return absl::InternalError(absl::StrCat("encoding ", w.rows, " rows into ", out.size(),
                                            " bytes instead of ", out_row * w.rows));
  }
  // Whole rows that fit the type's blocks: QuantizeRow cannot fail on them.
  auto encode = [&](int64_t begin, int64_t end) {
    std::vector<float> row(w.cols);
    for (int64_t r = begin; r < end; ++r) {
      DequantizeWeightRow(w, r, row.data());
      (void)QuantizeRow(type, row.data(), out.data() + r * out_row, w.cols);
    }
  };
  if (pool != nullptr && pool->num_threads() > 1) {
    pool->ParallelFor(w.rows, encode);
  } else {
    encode(0, w.rows);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> EncodeMatrix(const WeightView& w, DType type,
                                                  ThreadPool* pool) {
  MOE_RETURN_IF_ERROR(CheckEncodable(type, w.cols));
  std::vector<uint8_t> out(RowBytes(type, w.cols) * w.rows);
  MOE_RETURN_IF_ERROR(EncodeMatrixInto(w, type, absl::MakeSpan(out), pool));
  return out;
}

absl::StatusOr<ModelSpec> ReencodeSpec(const ModelSpec& spec,
                                       const std::function<DType(const TensorSpec&)>& type_of,
                                       ThreadPool* pool) {
  ModelSpec result = spec;
  // The result is no longer the source file's bytes: the expert cache must not read it there.
  result.source_files.clear();
  for (TensorSpec& t : result.tensors) {
    const DType type = type_of(t);
    if (type == t.dtype) continue;
    const int64_t cols = t.shape.back();
    if (absl::Status fits = CheckEncodable(type, cols); !fits.ok()) {  // now, not in the write
      return Annotate(fits, absl::StrCat("tensor '", t.name, "'"));
    }
    TensorSpec source = t;
    t.dtype = type;
    t.data = {};
    t.produce = [source = std::move(source), type, pool](absl::Span<uint8_t> out) -> absl::Status {
      std::vector<uint8_t> made;  // a deferred source (a converting import) made first
      const uint8_t* bytes = source.data.data();
      if (source.deferred()) {
        made.resize(source.byte_size());
        // Not MakeDeferredTensor: whoever makes this tensor names it (the same name) already.
        MOE_RETURN_IF_ERROR(source.produce(absl::MakeSpan(made)));
        bytes = made.data();
      }
      const int64_t cols = source.shape.back(), rows = source.num_elements() / cols;
      return EncodeMatrixInto({source.dtype, rows, cols, bytes}, type, out, pool);
    };
  }
  return result;
}

std::string SchemeTensorName(const TensorSpec& t) {
  if (t.expert < 0) return t.name;
  // blk.L.BASE.E.weight
  std::vector<std::string> parts = absl::StrSplit(t.name, '.');
  if (parts.size() != 5) return t.name;
  return absl::StrCat(parts[0], ".", parts[1], ".", parts[2], "_exps.", parts[4]);
}

DType SchemeTypeFor(const std::string& scheme, const TensorSpec& t, int64_t n_layer) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
  return QuantTypeFor(scheme, SchemeTensorName(t), t.shape.back(), t.layer, n_layer, rows == 1);
}

}  // namespace moe
