// Which checkpoint tensors an architecture needs, under which canonical (GGUF-style) names and
// shapes, and where each canonical element comes from when the layouts differ: DeepSeek's
// kv_b_proj split into attn_k_b (per head, transposed) and attn_v_b, gpt-oss's stacked experts
// (gate and up interleaved row by row, stored transposed, or as MXFP4 blocks and scales).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lib/import/hf_config.h"

namespace moe {

struct WantedTensor {
  std::string hf_name;  // the checkpoint tensor it comes from
  std::string name;     // canonical
  std::vector<int64_t> hf_shape;
  std::vector<int64_t> shape;
  int layer = -1;
  int expert = -1;
  bool router = false;    // stays F32 when the weights are quantized on import
  bool keep_f32 = false;  // norms, biases, sinks: F32 whatever type is asked for
  // Element i of the result (row-major over `shape`) is element gather(i) of the checkpoint
  // tensor; unset: element i (the same layout, possibly another shape).
  std::function<int64_t(int64_t)> gather;
  // Row r of the result (rows of shape.back() elements, as long as the checkpoint's) is row
  // source_row(r) of the checkpoint tensor, read whole: rows reordered or selected (value heads
  // retiled, fused projections taken apart). Unlike gather, one call a row, and its rows are
  // checked to lie in the checkpoint tensor during the import.
  std::function<int64_t(int64_t)> source_row;
  // Without gather: element i of the result is element first_element + i of the checkpoint
  // tensor (a matrix sliced from a stack or from fused rows, carried as a span of it).
  int64_t first_element = 0;
  // A matrix transposed against the checkpoint's rows (experts stacked inputs first), when
  // col_stride > 0: element (r, c) of the result is element first_element + r * row_stride +
  // c * col_stride of the checkpoint tensor. Read in tiles of columns, each a run of the
  // checkpoint's elements, rather than element by element through gather.
  int64_t row_stride = 0, col_stride = 0;
  // Each value of the result is this of the checkpoint's (Mamba-2's A_log -> A = -exp(A_log));
  // unset: the value itself.
  std::function<float(float)> value;
  // MXFP4 (gpt-oss experts): hf_name holds the blocks [..., rows, groups, 16] and mx_scales the
  // E8M0 scales [..., rows, groups]; row r of the result is row mx_row(r) of them, counted over
  // all leading dimensions.
  std::string mx_scales;
  std::vector<int64_t> mx_scales_shape;
  std::function<int64_t(int64_t)> mx_row;
};

// `has` says whether the checkpoint holds a tensor (gpt-oss experts: MXFP4 or plain).
std::vector<WantedTensor> WantedTensors(const HfConfig& c,
                                        const std::function<bool(const std::string&)>& has);

}  // namespace moe
