// Token activations made ready for products with weight rows of any type. Quantized weights
// meet activations quantized once to 8-bit blocks (one scale per super-block of 256 where all
// the weights reading them are K-quants, as llama.cpp's q8_K): integer dot products per row, or for
// the row-group layouts (repack.h) one kernel over 16 rows and up to 8 tokens at a time, whatever
// the batch size. Other quantized types in prompt batches (n >= kGemmMinTokens) are
// dequantized a few rows at a time and multiplied with the float activations by an F32 GEMM
// kernel, reusing each dequantized weight across all the tokens. Float weights and exact mode
// use float activations.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/q8_activations.h"
#include "lib/backend/weight_view.h"
#include "lib/base/scratch_vector.h"

namespace moe {

class PreparedActivations {
 public:
  PreparedActivations(SimdLevel level, bool quantize) : level_(level), quantize_(quantize) {}

  // x: n rows of `cols` floats, valid until the next Prepare, for products with `weights`.
  // Quantizes only when some of them are quantized and will take 8-bit activations: a
  // row-group layout, or any quantized type below the GEMM's batch size. Returns whether the
  // tokens need quantizing: then PrepareTokens must cover [0, n) before any Products, in
  // disjoint ranges from any threads.
  bool Prepare(const float* x, int64_t n, int64_t cols, absl::Span<const WeightView> weights);

  // Tokens rows[0..m) of `x` (rows of `cols` floats) for products with `weights`, copied by
  // PrepareTokens, which must then cover [0, m). Where src (prepared from the same x) holds
  // those tokens' 8-bit blocks, they are copied instead of quantized again: the routed experts
  // of a prompt batch each take some of its tokens, and quantizing once per token rather than
  // once per expert saves three quarters of that work at top-4. src may be null.
  void PrepareGathered(const PreparedActivations* src, const float* x, int64_t cols,
                       const int32_t* rows, int64_t m, absl::Span<const WeightView> weights);

  // Makes tokens [t0, t1) ready: quantizes them, or for gathered ones copies them.
  void PrepareTokens(int64_t t0, int64_t t1);

  // Of an input given to Prepare, makes columns [c0, c1) of every token ready instead, c0 and c1
  // multiples of ColumnUnit(): the same blocks PrepareTokens makes there, so that columns can be
  // quantized by the threads that wrote them, as they are written, rather than after a loop by
  // tokens that reads them from the other cores.
  void PrepareColumns(int64_t c0, int64_t c1);
  // The columns quantized together: one super-block with a scale per super-block, else a block.
  int64_t ColumnUnit() const;

  // y[t * ldy + (r - r0)] = row r of w . token t, for r in [r0, r1) and every token. Safe to
  // call from many threads at once. For row-group layouts r0 and r1 are multiples of 16.
  void Products(const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ldy) const;

  int64_t n() const { return n_; }
  // The float rows given to Prepare (null for gathered tokens that need no floats).
  const float* x() const { return x_; }

  // Batches at least this large use the GEMM path when the CPU has a GEMM kernel.
  static constexpr int64_t kGemmMinTokens = 4;

 private:
  // PrepareTokens' 8-bit blocks (and aux arrays): quantized, or copied for gathered tokens.
  void PrepareBlocks(int64_t t0, int64_t t1);
  void RowDots(const WeightView& w, int64_t r, float* out, int64_t stride) const;
  void GroupProducts(const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ldy) const;
  // Whether products with weights of type t read the 8-bit blocks (given use_gemm_): quantized
  // weights whenever activations are quantized, and in exact mode the row-group kernels at
  // every batch size, other quantized types below the GEMM's batch size.
  bool ReadsBlocks(DType t) const;
  // Whether 8-bit activations pay for these weights at this batch size (and sets use_gemm_).
  bool WantsQuantized(int64_t n, int64_t cols, absl::Span<const WeightView> weights);
  // Sets what both Prepare calls set; returns WantsQuantized.
  bool Reset(const float* x, int64_t n, int64_t cols, const PreparedActivations* src,
             const int32_t* rows, absl::Span<const WeightView> weights);
  // Sizes the 8-bit blocks (and aux arrays) for n_ tokens of cols_, or empties them.
  void SizeBlocks(bool quantize);

  SimdLevel level_;
  bool quantize_;
  bool use_gemm_ = false;
  bool aux_ = false;  // whether row kernels will read xd_, xsum_, xsum16_
  ActivationScales scales_ = ActivationScales::kPerBlock;
  const float* x_ = nullptr;
  int64_t n_ = 0, cols_ = 0;
  ScratchVector<Q8Block> q_;
  ScratchVector<float> xd_, xsum_;  // the blocks' scales and quant sums, [n x nb]
  ScratchVector<float> xsum16_;     // the sums of each block's two halves, [n x 2 nb]
  ScratchVector<SplitSums> split_;  // per super-block scale: the blocks' split sums, [n x nb / 8]
  // Gathered tokens: their source, rows in it and whether blocks / floats are copied from it.
  const PreparedActivations* src_ = nullptr;
  const float* src_x_ = nullptr;
  const int32_t* rows_ = nullptr;
  bool copy_blocks_ = false, copy_floats_ = false;
  ScratchVector<float> floats_;  // the gathered float rows, where some weight reads floats
};

}  // namespace moe
