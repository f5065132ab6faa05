#include "lib/import/legacy_latent_kv.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

struct LatentSizes {
  int64_t heads, rank, nope, v;
};

// attn_v_b[h][i] = row h (nope + v) + nope + i of attn_kv_b, byte for byte.
TensorSpec ValueRows(const TensorSpec& kv_b, const LatentSizes& s, ModelSpec* spec) {
  TensorSpec t;
  t.name = LayerTensorName(kv_b.layer, "attn_v_b");
  t.dtype = kv_b.dtype;
  t.shape = {s.heads, s.v, s.rank};
  t.layer = kv_b.layer;
  const size_t row = RowBytes(kv_b.dtype, s.rank);
  auto buf = std::make_shared<std::vector<uint8_t>>(t.byte_size());
  for (int64_t h = 0; h < s.heads; ++h) {
    std::memcpy(buf->data() + h * s.v * row, kv_b.data.data() + (h * (s.nope + s.v) + s.nope) * row,
                s.v * row);
  }
  t.data = absl::MakeConstSpan(*buf);
  spec->owners.push_back(std::move(buf));
  return t;
}

// attn_k_b[h][c][j] = attn_kv_b[h (nope + v) + j][c]: each head's nope key rows, transposed.
absl::StatusOr<TensorSpec> KeyRowsTransposed(const TensorSpec& kv_b, const LatentSizes& s,
                                             ModelSpec* spec) {
  TensorSpec t;
  t.name = LayerTensorName(kv_b.layer, "attn_k_b");
  t.dtype = LegacyKeyType(kv_b.dtype, s.nope);
  t.shape = {s.heads, s.rank, s.nope};
  t.layer = kv_b.layer;
  const size_t src_row = RowBytes(kv_b.dtype, s.rank), dst_row = RowBytes(t.dtype, s.nope);
  auto buf = std::make_shared<std::vector<uint8_t>>(t.byte_size());
  std::vector<float> head(s.nope * s.rank), column(s.nope);
  for (int64_t h = 0; h < s.heads; ++h) {
    for (int64_t j = 0; j < s.nope; ++j) {
      DequantizeRow(kv_b.dtype, kv_b.data.data() + (h * (s.nope + s.v) + j) * src_row,
                    head.data() + j * s.rank, s.rank);
    }
    for (int64_t c = 0; c < s.rank; ++c) {
      for (int64_t j = 0; j < s.nope; ++j) column[j] = head[j * s.rank + c];
      MOE_RETURN_IF_ERROR(
          QuantizeRow(t.dtype, column.data(), buf->data() + (h * s.rank + c) * dst_row, s.nope));
    }
  }
  t.data = absl::MakeConstSpan(*buf);
  spec->owners.push_back(std::move(buf));
  return t;
}

}  // namespace

DType LegacyKeyType(DType kv_b, int64_t nope) {
  if (kv_b == DType::kF32 || kv_b == DType::kF16 || kv_b == DType::kBF16) return kv_b;
  return RowSizeValid(DType::kQ8_0, nope) ? DType::kQ8_0 : DType::kF32;
}

absl::Status SplitLegacyLatentKv(ModelSpec* spec) {
  const HParams& hp = spec->hp;
  if (!hp.latent_attention()) return absl::OkStatus();
  const LatentSizes s{hp.n_head, hp.kv_lora_rank, hp.qk_nope_dim, hp.v_head_dim};
  // Before the sizes are validated (after import): bound them so the products below cannot
  // overflow on a corrupt file.
  for (int64_t size : {s.heads, s.rank, s.nope, s.v}) {
    if (size <= 0 || size > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("latent attention sizes out of range: ", s.heads, " heads, kv_lora_rank ",
                       s.rank, ", key ", s.nope, " and value ", s.v, " per head"));
    }
  }
  absl::flat_hash_set<int> absorbed;  // layers the file gives attn_k_b already
  for (const TensorSpec& t : spec->tensors) {
    if (t.layer >= 0 && t.name == LayerTensorName(t.layer, "attn_k_b")) absorbed.insert(t.layer);
  }
  std::vector<TensorSpec> tensors;
  tensors.reserve(spec->tensors.size() + hp.n_layer);
  for (TensorSpec& t : spec->tensors) {
    if (t.layer < 0 || t.name != LayerTensorName(t.layer, "attn_kv_b")) {
      tensors.push_back(std::move(t));
      continue;
    }
    if (absorbed.contains(t.layer)) continue;
    const std::vector<int64_t> want = {s.heads * (s.nope + s.v), s.rank};
    if (t.shape != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' has shape [", absl::StrJoin(t.shape, ", "),
                       "], expected [", absl::StrJoin(want, ", "), "] (", s.heads, " heads of ",
                       s.nope, " key and ", s.v, " value rows over kv_lora_rank ", s.rank, ")"));
    }
    if (RowGroup(t.dtype) > 1 || IsRuntimeLayout(t.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' is in a run-time layout (", DTypeName(t.dtype),
                       "): only files' own types can be split"));
    }
    MOE_ASSIGN_OR_RETURN(TensorSpec k_b, KeyRowsTransposed(t, s, spec));
    tensors.push_back(std::move(k_b));
    tensors.push_back(ValueRows(t, s, spec));
  }
  spec->tensors = std::move(tensors);
  return absl::OkStatus();
}

}  // namespace moe
