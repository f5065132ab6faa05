// The types moe-quantize and moe-synth choose, where rows are not whole blocks of the scheme's
// type: llama-quantize's fallbacks (llama-quant.cpp's tensor_type_fallback), so such files carry
// what llama.cpp's of the same scheme carry.
#include "lib/import/quant_scheme.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(QuantSchemeTest, RowsOfWholeBlocksKeepTheirType) {
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kQ8_0, DType::kIQ4_XS}) {
    EXPECT_EQ(FallbackForRowLength(t, 2048), t) << DTypeName(t);
  }
}

TEST(QuantSchemeTest, PartialSuperBlocksFallBackAsLlamaQuantizeDoes) {
  // 1408: GLM-4.5-Air's and DeepSeek-V2-Lite's expert width; 2880: gpt-oss's embedding.
  for (int64_t cols : {1408, 2880}) {
    EXPECT_EQ(FallbackForRowLength(DType::kQ2_K, cols), DType::kQ4_0);
    EXPECT_EQ(FallbackForRowLength(DType::kQ3_K, cols), DType::kQ4_0);
    EXPECT_EQ(FallbackForRowLength(DType::kQ4_K, cols), DType::kQ5_0);
    EXPECT_EQ(FallbackForRowLength(DType::kQ5_K, cols), DType::kQ5_1);
    EXPECT_EQ(FallbackForRowLength(DType::kQ6_K, cols), DType::kQ8_0);
    EXPECT_EQ(FallbackForRowLength(DType::kIQ4_XS, cols), DType::kIQ4_NL);
  }
  // Not even 32-value blocks: F16.
  EXPECT_EQ(FallbackForRowLength(DType::kQ4_K, 1400), DType::kF16);
  EXPECT_EQ(FallbackForRowLength(DType::kQ8_0, 1400), DType::kF16);
}

TEST(QuantSchemeTest, Q4_K_MOnAnExpertWidthOf1408) {
  // ffn_down_exps rows are 1408 long: its Q4_K layers (of 24: layer 4, not among the first and
  // last three nor every third from 5) take Q5_0, its Q6_K layers Q8_0; ffn_up's rows (the
  // embedding, 2048) keep Q4_K.
  EXPECT_EQ(QuantTypeFor("q4_k_m", "blk.4.ffn_down_exps.weight", 1408, 4, 24, false), DType::kQ5_0);
  EXPECT_EQ(QuantTypeFor("q4_k_m", "blk.5.ffn_down_exps.weight", 1408, 5, 24, false), DType::kQ8_0);
  EXPECT_EQ(QuantTypeFor("q4_k_m", "blk.0.ffn_down_exps.weight", 1408, 0, 24, false), DType::kQ8_0);
  EXPECT_EQ(QuantTypeFor("q4_k_m", "blk.1.ffn_up_exps.weight", 2048, 1, 24, false), DType::kQ4_K);
  EXPECT_EQ(QuantTypeFor("q5_k", "blk.1.ffn_down_exps.weight", 1408, 1, 24, false), DType::kQ5_1);
}

// f32: every matrix dequantized to F32 (llama.cpp's ALL_F32 file type), for exact reference runs
// of a quantized file's weights.
TEST(QuantSchemeTest, F32KeepsEveryMatrixInF32) {
  EXPECT_TRUE(IsQuantScheme("f32"));
  EXPECT_EQ(QuantTypeFor("f32", "blk.3.ffn_up_exps.weight", 2880, 3, 24, false), DType::kF32);
  EXPECT_EQ(QuantTypeFor("f32", "output.weight", 1400, -1, 24, false), DType::kF32);
  EXPECT_EQ(LlamaFileType("f32"), 0u);
}

}  // namespace
}  // namespace moe
