#include "lib/import/hf_fp8.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/backend/cpu/quant_rows.h"

namespace moe {

absl::StatusOr<std::optional<Fp8Blocks>> Fp8BlocksOf(const nlohmann::json& config) {
  if (!config.is_object()) return std::nullopt;
  auto q = config.find("quantization_config");
  if (q == config.end() || !q->is_object()) return std::nullopt;
  auto m = q->find("quant_method");
  const std::string method = m != q->end() && m->is_string() ? m->get<std::string>() : "";
  if (method == "mxfp4") return std::nullopt;  // gpt-oss's experts: their _blocks and _scales
  if (method != "fp8") {
    return absl::UnimplementedError(absl::StrCat(
        "config.json quantization_config quant_method '", method,
        "' is not supported (block-scaled \"fp8\" and gpt-oss's \"mxfp4\" are; F32, F16 and "
        "BF16 weights need none)"));
  }
  auto block = q->find("weight_block_size");
  if (block == q->end() || !block->is_array() || block->size() != 2 ||
      !(*block)[0].is_number_integer() || !(*block)[1].is_number_integer() ||
      (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0) {
    return absl::UnimplementedError(
        "config.json quantization_config \"fp8\" without a weight_block_size of two positive "
        "integers (per-tensor FP8 scales) is not supported");
  }
  return Fp8Blocks{(*block)[0].get<int64_t>(), (*block)[1].get<int64_t>()};
}

float E4m3ToFloat(uint8_t v) {
  const int sign = v >> 7, exponent = (v >> 3) & 0xf, mantissa = v & 7;
  if (exponent == 0xf && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0f, -6)
                                        : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return sign ? -magnitude : magnitude;
}

absl::StatusOr<std::vector<float>> DequantizeFp8(const SafetensorsTensor& weight,
                                                 const SafetensorsTensor& scale_inv, Fp8Blocks b) {
  const size_t dims = weight.shape.size();
  if (dims < 2) {
    return absl::UnimplementedError(absl::StrCat("FP8 tensor '", weight.name, "' has ", dims,
                                                 " dimensions; only matrices (or stacks of them) "
                                                 "are supported"));
  }
  // Leading dimensions (stacked experts) count matrices, each blocked on its own.
  int64_t matrices = 1;
  for (size_t i = 0; i + 2 < dims; ++i) matrices *= weight.shape[i];
  const int64_t rows = weight.shape[dims - 2], cols = weight.shape[dims - 1];
  const int64_t block_rows = (rows + b.rows - 1) / b.rows,
                block_cols = (cols + b.cols - 1) / b.cols;
  std::vector<int64_t> want_scale(weight.shape.begin(), weight.shape.end() - 2);
  want_scale.push_back(block_rows);
  want_scale.push_back(block_cols);
  if (scale_inv.shape != want_scale ||
      (scale_inv.dtype_name != "F32" && scale_inv.dtype_name != "BF16")) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 scale tensor '", scale_inv.name, "' is ", scale_inv.dtype_name,
                     " of shape [", absl::StrJoin(scale_inv.shape, ", "), "]; '", weight.name,
                     "' [", absl::StrJoin(weight.shape, ", "), "] in blocks of ", b.rows, "x",
                     b.cols, " needs F32 or BF16 [", absl::StrJoin(want_scale, ", "), "]"));
  }
  const int64_t scales_per_matrix = block_rows * block_cols;
  std::vector<float> scale(matrices * scales_per_matrix);
  DequantizeRow(*scale_inv.dtype, scale_inv.data.data(), scale.data(),
                static_cast<int64_t>(scale.size()));
  float table[256];
  for (int i = 0; i < 256; ++i) table[i] = E4m3ToFloat(static_cast<uint8_t>(i));
  std::vector<float> out(matrices * rows * cols);
  for (int64_t r = 0; r < matrices * rows; ++r) {
    const float* block_scale =
        scale.data() + r / rows * scales_per_matrix + (r % rows / b.rows) * block_cols;
    const uint8_t* q = weight.data.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = table[q[c]] * block_scale[c / b.cols];
  }
  return out;
}

}  // namespace moe
