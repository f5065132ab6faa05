// The element types a KV cache may hold, checked in one place for the contiguous and the paged
// cache: F32, F16, or Q8_0 (blocks of 32 values with one half-precision scale, as llama.cpp's
// Q8_0; half the bytes of F16, measured fidelity in the README). A Q8_0 block must not straddle
// two KV heads, so Q8_0 needs head_dim to be a multiple of 32.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "lib/base/dtype.h"

namespace moe {

// A layer's convolution width (the caches' per-layer conv_width) that says it caches nothing.
inline constexpr int64_t kNoKvRows = -1;

inline absl::Status CheckKvType(DType t, int64_t head_dim) {
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kQ8_0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache type must be F32, F16 or Q8_0, not ", DTypeName(t)));
  }
  if (t == DType::kQ8_0 && head_dim % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a Q8_0 KV cache needs a head size that is a multiple of 32; this model's is ",
                     head_dim, " (use F16)"));
  }
  return absl::OkStatus();
}

// What one layer of a cache keeps. An attention layer: per position, K and V rows (or K alone,
// when the values are read from the keys) of n_heads x head_dim in the cache's element type. A
// convolution layer (LFM2's short convolution; Mamba-2's and the gated delta net's causal one)
// keeps no rows per position: it carries a slot from each step to the next, the last ring_rows
// (kernel - 1) F32 rows of its convolution's input (head_dim = the row's width) and, for a
// recurrent layer, its state of state_floats F32 values (KvLayerView::state), as llama.cpp's
// recurrent cache keeps one conv and one ssm state a sequence. A layer without a mixer
// (Nemotron-H's feed-forward-only layers) keeps nothing.
struct KvLayerRows {
  DType dtype = DType::kF32;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t planes = 2;  // rows per position: K and V, K alone, or none
  int64_t state_floats = 0;
  int64_t ring_rows = 0;
  bool carried = false;  // a convolution layer's slot instead of rows

  static KvLayerRows Attention(DType dtype, int64_t n_heads, int64_t head_dim,
                               bool values_in_keys) {
    return {dtype, n_heads, head_dim, values_in_keys ? 1 : 2};
  }
  static KvLayerRows Convolution(int64_t width, int64_t ring_rows, int64_t state_floats = 0) {
    return {DType::kF32, 1, width, 0, state_floats, ring_rows, true};
  }
  static KvLayerRows None() { return {DType::kF32, 0, 0, 0}; }
  // F32 values of one carried slot: the state, then the ring of rows.
  int64_t slot_floats() const { return carried ? state_floats + ring_rows * head_dim : 0; }
  size_t slot_bytes() const { return static_cast<size_t>(slot_floats()) * sizeof(float); }
  size_t row_bytes() const { return RowBytes(dtype, n_heads * head_dim); }
  size_t head_bytes() const { return RowBytes(dtype, head_dim); }  // one head's of a row

  // Layer l's rows from the caches' per-layer lists (each may be empty: none): conv_width > 0 a
  // convolution layer (ring_rows and state_floats its slot's), kNoKvRows nothing, else
  // `attention`.
  static KvLayerRows Of(absl::Span<const int64_t> conv_width, absl::Span<const int64_t> ring_rows,
                        absl::Span<const int64_t> state_floats, int64_t l,
                        const KvLayerRows& attention) {
    if (!conv_width.empty() && conv_width[l] > 0) {
      return Convolution(conv_width[l], ring_rows.empty() ? 0 : ring_rows[l],
                         state_floats.empty() ? 0 : state_floats[l]);
    }
    if (!conv_width.empty() && conv_width[l] == kNoKvRows) return None();
    return attention;
  }
};

}  // namespace moe
