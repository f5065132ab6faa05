#include "tests/hf/import_equals_gguf.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/dtype.h"

namespace moe::testing {

std::string DescribeHParams(const HParams& h) {
  std::string s;
  auto add = [&](const char* k, double v) { s += std::string(k) + "=" + std::to_string(v) + " "; };
  add("n_vocab", h.n_vocab), add("n_embd", h.n_embd), add("n_layer", h.n_layer);
  add("n_head", h.n_head), add("n_head_kv", h.n_head_kv), add("head_dim", h.head_dim);
  add("value_dim", h.value_dim), add("n_ctx_train", h.n_ctx_train), add("n_expert", h.n_expert);
  add("n_expert_used", h.n_expert_used), add("n_ff_expert", h.n_ff_expert);
  add("n_ff_shared", h.n_ff_shared), add("rms_eps", h.rms_eps);
  add("rope_freq_base", h.rope_freq_base), add("rope_dim", h.rope_dim);
  add("rope_style", static_cast<int>(h.rope_style)), add("qk_norm", static_cast<int>(h.qk_norm));
  add("norm_topk_prob", h.norm_topk_prob), add("has_qkv_bias", h.has_qkv_bias);
  add("tied_output", h.tied_output), add("n_layer_dense", h.n_layer_dense);
  add("n_ff_dense", h.n_ff_dense), add("gating", static_cast<int>(h.gating));
  add("has_selection_bias", h.has_selection_bias), add("routed_scale", h.routed_scale);
  add("n_expert_groups", h.n_expert_groups), add("n_group_used", h.n_group_used);
  add("n_nextn_layer", h.n_nextn_layer), add("yarn_factor", h.yarn_factor);
  add("yarn_orig_ctx", h.yarn_orig_ctx), add("yarn_beta_fast", h.yarn_beta_fast);
  add("yarn_beta_slow", h.yarn_beta_slow), add("yarn_log_mul", h.yarn_log_mul);
  add("rope_attn_factor", h.rope_attn_factor), add("kq_scale", h.kq_scale);
  add("q_lora_rank", h.q_lora_rank), add("kv_lora_rank", h.kv_lora_rank);
  add("qk_nope_dim", h.qk_nope_dim), add("v_head_dim", h.v_head_dim);
  add("attn_out_bias", h.has_attn_out_bias), add("sinks", h.has_attn_sinks);
  add("sliding_window", h.sliding_window), add("swa_period", h.swa_period);
  add("router_bias", h.has_router_bias), add("expert_bias", h.has_expert_bias);
  add("swiglu_clamped", h.swiglu_clamped);
  return s;
}

void ExpectImportStatesTheGguf(const ModelSpec& hf, const ModelSpec& gguf) {
  EXPECT_EQ(hf.arch, gguf.arch);
  EXPECT_TRUE(hf.hp == gguf.hp) << "\nhf:   " << DescribeHParams(hf.hp)
                                << "\ngguf: " << DescribeHParams(gguf.hp);
  EXPECT_EQ(hf.tensors.size(), gguf.tensors.size());
  for (const TensorSpec& want : gguf.tensors) {
    SCOPED_TRACE(want.name);
    const TensorSpec* got = hf.Find(want.name);
    ASSERT_NE(got, nullptr);
    ASSERT_EQ(got->shape, want.shape);
    EXPECT_EQ(got->layer, want.layer);
    EXPECT_EQ(got->expert, want.expert);
    if (want.dtype == DType::kMXFP4) {  // repacked, not converted: the very bytes
      EXPECT_EQ(got->dtype, DType::kMXFP4);
      ASSERT_EQ(got->data.size(), want.byte_size());
      EXPECT_EQ(0, std::memcmp(got->data.data(), want.data.data(), want.byte_size()));
      continue;
    }
    EXPECT_EQ(got->dtype, DType::kF32);
    const int64_t cols = want.shape.back(), rows = want.num_elements() / cols;
    std::vector<float> a(cols), b(cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(want.dtype, want.data.data() + r * RowBytes(want.dtype, cols), a.data(), cols);
      DequantizeRow(got->dtype, got->data.data() + r * RowBytes(got->dtype, cols), b.data(), cols);
      ASSERT_EQ(a, b) << "row " << r;
    }
  }
}

}  // namespace moe::testing
