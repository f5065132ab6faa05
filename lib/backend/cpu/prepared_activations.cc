#include "lib/backend/cpu/prepared_activations.h"

#include <algorithm>

#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/gemm.h"
#include "lib/backend/cpu/group_products.h"
#include "lib/backend/cpu/quant_rows.h"

namespace moe {

bool PreparedActivations::ReadsBlocks(DType t) const {
  // With 8-bit activations, quantized weights take the integer kernels at every batch size: the
  // float GEMM would give a token other bits in a batch than alone (the output head of a
  // vocabulary that is not a multiple of 16 did).
  return IsQuantized(t) && (RowGroup(t) > 1 || !use_gemm_ || quantize_);
}

bool PreparedActivations::WantsQuantized(int64_t n, int64_t cols,
                                         absl::Span<const WeightView> weights) {
  use_gemm_ = n >= kGemmMinTokens && level_ >= SimdLevel::kAvx512 && cols % 16 == 0;
  bool blocks_read = false, row_kernels = false, k_quants_only = true;
  for (const WeightView& w : weights) {
    if (!ReadsBlocks(w.dtype)) continue;
    blocks_read = true;
    row_kernels |= RowGroup(w.dtype) == 1;
    k_quants_only &= GetDTypeInfo(w.dtype).block_elems == kSuperBlockValues;
  }
  // Only the row kernels read the blocks' sums as floats (the aux arrays).
  const bool quantize = quantize_ && blocks_read && cols % 32 == 0;
  aux_ = quantize && row_kernels;
  // K-quant weights alone take one activation scale per super-block, as llama.cpp gives them.
  scales_ = quantize && k_quants_only && cols % kSuperBlockValues == 0
                ? ActivationScales::kPerSuperBlock
                : ActivationScales::kPerBlock;
  return quantize;
}

void PreparedActivations::SizeBlocks(bool quantize) {
  const int64_t blocks = quantize ? n_ * (cols_ / 32) : 0, aux = aux_ ? blocks : 0;
  q_.resize(blocks);
  split_.resize(scales_ == ActivationScales::kPerSuperBlock ? blocks / 8 : 0);
  xd_.resize(aux);
  xsum_.resize(aux);
  xsum16_.resize(2 * aux);
}

bool PreparedActivations::Reset(const float* x, int64_t n, int64_t cols,
                                const PreparedActivations* src, const int32_t* rows,
                                absl::Span<const WeightView> weights) {
  x_ = src_x_ = x;
  n_ = n;
  cols_ = cols;
  src_ = src;
  rows_ = rows;
  copy_blocks_ = copy_floats_ = false;
  return WantsQuantized(n, cols, weights);
}

bool PreparedActivations::Prepare(const float* x, int64_t n, int64_t cols,
                                  absl::Span<const WeightView> weights) {
  const bool quantize = Reset(x, n, cols, nullptr, nullptr, weights);
  SizeBlocks(quantize);
  return quantize;
}

void PreparedActivations::PrepareGathered(const PreparedActivations* src, const float* x,
                                          int64_t cols, const int32_t* rows, int64_t m,
                                          absl::Span<const WeightView> weights) {
  const bool quantize = Reset(x, m, cols, src, rows, weights);
  copy_blocks_ = quantize && src != nullptr && !src->q_.empty() && src->x_ == x &&
                 (!aux_ || src->aux_) && src->scales_ == scales_;
  // Float rows are read by float weights and by the GEMM path, and quantized from where src
  // has no blocks.
  bool floats_read = quantize && !copy_blocks_;
  for (const WeightView& w : weights) floats_read |= !(quantize && ReadsBlocks(w.dtype));
  copy_floats_ = floats_read;
  if (copy_floats_) floats_.resize(m * cols);
  x_ = copy_floats_ ? floats_.data() : nullptr;
  SizeBlocks(quantize);
}

void PreparedActivations::PrepareTokens(int64_t t0, int64_t t1) {
  PrepareBlocks(t0, t1);
  if (!split_.empty()) {  // from the blocks, quantized or copied
    const int64_t nsb = cols_ / kSuperBlockValues;
    SplitSuperBlockSums(q_.data() + t0 * 8 * nsb, (t1 - t0) * nsb, split_.data() + t0 * nsb);
  }
}

int64_t PreparedActivations::ColumnUnit() const {
  return scales_ == ActivationScales::kPerSuperBlock ? kSuperBlockValues : 32;
}

void PreparedActivations::PrepareColumns(int64_t c0, int64_t c1) {
  const int64_t nb = cols_ / 32, b0 = c0 / 32, nbc = (c1 - c0) / 32;
  for (int64_t t = 0; t < n_; ++t) {
    Q8Block* q = q_.data() + t * nb + b0;
    QuantizeActivations(x_ + t * cols_ + c0, c1 - c0, q, scales_);
    if (aux_) {
      FillQ8Aux(q, nbc, xd_.data() + t * nb + b0, xsum_.data() + t * nb + b0,
                xsum16_.data() + 2 * (t * nb + b0));
    }
    if (!split_.empty()) SplitSuperBlockSums(q, nbc / 8, split_.data() + (t * nb + b0) / 8);
  }
}

void PreparedActivations::PrepareBlocks(int64_t t0, int64_t t1) {
  const int64_t nb = cols_ / 32;
  if (rows_ != nullptr) {
    for (int64_t i = t0; i < t1; ++i) {
      const int64_t r = rows_[i];
      if (copy_floats_) std::copy_n(src_x_ + r * cols_, cols_, floats_.data() + i * cols_);
      if (copy_blocks_) std::copy_n(src_->q_.data() + r * nb, nb, q_.data() + i * nb);
      if (copy_blocks_ && aux_) {
        std::copy_n(src_->xd_.data() + r * nb, nb, xd_.data() + i * nb);
        std::copy_n(src_->xsum_.data() + r * nb, nb, xsum_.data() + i * nb);
        std::copy_n(src_->xsum16_.data() + 2 * r * nb, 2 * nb, xsum16_.data() + 2 * i * nb);
      }
    }
    if (copy_blocks_ || q_.empty()) return;
  }
  for (int64_t t = t0; t < t1; ++t)
    QuantizeActivations(x_ + t * cols_, cols_, q_.data() + t * nb, scales_);
  if (!aux_) return;
  FillQ8Aux(q_.data() + t0 * nb, (t1 - t0) * nb, xd_.data() + t0 * nb, xsum_.data() + t0 * nb,
            xsum16_.data() + 2 * t0 * nb);
}

void PreparedActivations::RowDots(const WeightView& w, int64_t r, float* out,
                                  int64_t stride) const {
  const uint8_t* row = w.row(r);
  if (!IsQuantized(w.dtype)) {
    FloatDotFn dot = GetFloatDot(w.dtype, level_);
    for (int64_t t = 0; t < n_; ++t) out[t * stride] = dot(row, x_ + t * cols_, cols_);
    return;
  }
  if (!q_.empty()) {
    const int64_t nb = cols_ / 32;
    if (SplitQuantDotFn split = GetSplitQuantDot(w.dtype, level_)) {
      for (int64_t t = 0; t < n_; ++t) {
        const Q8Aux aux{xd_.data() + t * nb, xsum_.data() + t * nb, xsum16_.data() + 2 * t * nb};
        out[t * stride] = split(row, q_.data() + t * nb, aux, cols_);
      }
      return;
    }
    QuantDotFn dot = GetQuantDot(w.dtype, level_);
    for (int64_t t = 0; t < n_; ++t) out[t * stride] = dot(row, q_.data() + t * nb, cols_);
    return;
  }
  // Exact mode: dequantize the row once, then F32 dots.
  thread_local std::vector<float> deq;
  if (static_cast<int64_t>(deq.size()) < cols_) deq.resize(cols_);
  DequantizeRow(w.dtype, row, deq.data(), cols_);
  FloatDotFn dot = GetFloatDot(DType::kF32, level_);
  const uint8_t* d = reinterpret_cast<const uint8_t*>(deq.data());
  for (int64_t t = 0; t < n_; ++t) out[t * stride] = dot(d, x_ + t * cols_, cols_);
}

void PreparedActivations::GroupProducts(const WeightView& w, int64_t r0, int64_t r1, float* y,
                                        int64_t ldy) const {
  if (!q_.empty()) {
    const GroupProductsFn products = GetGroupProducts(w.dtype, level_, scales_);
    for (int64_t r = r0; r < r1; r += kGroupRows) {
      const uint8_t* next = r + kGroupRows < r1 ? w.row(r + kGroupRows) : nullptr;
      products(w.row(r), cols_, q_.data(), split_.empty() ? nullptr : split_.data(), n_,
               y + (r - r0), ldy, next);
    }
    return;
  }
  // Exact mode: the group's rows as floats, then float dots.
  thread_local std::vector<float> rows;
  rows.resize(kGroupRows * cols_);
  const FloatDotFn dot = GetFloatDot(DType::kF32, level_);
  for (int64_t r = r0; r < r1; r += kGroupRows) {
    for (int i = 0; i < kGroupRows; ++i) DequantizeWeightRow(w, r + i, rows.data() + i * cols_);
    for (int i = 0; i < kGroupRows; ++i) {
      const uint8_t* row = reinterpret_cast<const uint8_t*>(rows.data() + i * cols_);
      for (int64_t t = 0; t < n_; ++t) y[t * ldy + (r - r0) + i] = dot(row, x_ + t * cols_, cols_);
    }
  }
}

void PreparedActivations::Products(const WeightView& w, int64_t r0, int64_t r1, float* y,
                                   int64_t ldy) const {
  if (RowGroup(w.dtype) > 1) {
    GroupProducts(w, r0, r1, y, ldy);
    return;
  }
  if (!use_gemm_ || ReadsBlocks(w.dtype)) {
    for (int64_t r = r0; r < r1; ++r) RowDots(w, r, y + (r - r0), ldy);
    return;
  }
  // Dequantize a few rows at a time (they stay in L1/L2) and reuse them for every token.
  constexpr int64_t kRowsPerBlock = 16;
  const GemmFn gemm = GetGemm(level_);
  thread_local std::vector<float> rows;
  for (int64_t r = r0; r < r1; r += kRowsPerBlock) {
    const int64_t nr = std::min(kRowsPerBlock, r1 - r);
    const float* wf;
    if (w.dtype == DType::kF32) {
      wf = reinterpret_cast<const float*>(w.row(r));
    } else {
      rows.resize(nr * cols_);
      for (int64_t i = 0; i < nr; ++i)
        DequantizeRow(w.dtype, w.row(r + i), rows.data() + i * cols_, cols_);
      wf = rows.data();
    }
    gemm(wf, nr, x_, n_, cols_, y + (r - r0), ldy);
  }
}

}  // namespace moe
