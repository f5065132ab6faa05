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

// What one layer of a cache keeps per position. An attention layer: K and V rows (or K alone, when
// the values are read from the keys) of n_heads x head_dim in the cache's element type. A short
// convolution layer (LFM2): one F32 row of its convolution's input, which it reads back for the
// positions its kernel spans; F32 because the state llama.cpp keeps for it is. A recurrent layer
// (Mamba-2): such rows of its convolution's input, and per block of rows one state of
// state_floats F32 values, the state after the block's last position (KvLayerView::state). A
// layer without a mixer (Nemotron-H's feed-forward-only layers) keeps nothing.
struct KvLayerRows {
  DType dtype = DType::kF32;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t planes = 2;
  int64_t state_floats = 0;

  static KvLayerRows Attention(DType dtype, int64_t n_heads, int64_t head_dim,
                               bool values_in_keys) {
    return {dtype, n_heads, head_dim, values_in_keys ? 1 : 2};
  }
  static KvLayerRows Convolution(int64_t width) { return {DType::kF32, 1, width, 1}; }
  static KvLayerRows Recurrent(int64_t width, int64_t state_floats) {
    return {DType::kF32, 1, width, 1, state_floats};
  }
  static KvLayerRows None() { return {DType::kF32, 0, 0, 0}; }
  size_t state_bytes() const { return static_cast<size_t>(state_floats) * sizeof(float); }
  size_t row_bytes() const { return RowBytes(dtype, n_heads * head_dim); }

  // Layer l's rows from the caches' per-layer lists (either may be empty: none): state_floats > 0
  // a recurrent layer, conv_width > 0 a convolution layer, kNoKvRows nothing, else `attention`.
  static KvLayerRows Of(absl::Span<const int64_t> conv_width,
                        absl::Span<const int64_t> state_floats, int64_t l,
                        const KvLayerRows& attention) {
    if (!state_floats.empty() && state_floats[l] > 0) {
      return Recurrent(conv_width[l], state_floats[l]);
    }
    if (!conv_width.empty() && conv_width[l] > 0) return Convolution(conv_width[l]);
    if (!conv_width.empty() && conv_width[l] == kNoKvRows) return None();
    return attention;
  }
};

}  // namespace moe
