// The forward pass against a naive reference on models built here, for every architecture and
// shapes unlike the fixtures' (GQA ratios, head_dim != n_embd / n_head, odd expert counts).
#include "lib/model/forward.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "gtest/gtest.h"
#include "lib/model/kv_cache_for.h"
#include "tests/model/reference_model.h"

namespace moe {
namespace {

using testing::MakeRandomModel;
using testing::RandomModelOptions;
using testing::ReferenceForward;

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct Case {
  const char* name;
  RandomModelOptions o;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (Arch a : {Arch::kLlama, Arch::kQwen2Moe, Arch::kOlmoe, Arch::kQwen3Moe}) {
    RandomModelOptions o;
    o.arch = a;
    o.n_ff_shared = a == Arch::kQwen2Moe ? 56 : 0;
    cases.push_back({"base", o});
    RandomModelOptions odd = o;  // GQA 3:1, head_dim 16 with n_embd 40, 5 experts top-1
    odd.n_embd = 40, odd.n_head = 3, odd.n_head_kv = 1, odd.head_dim = 16, odd.n_expert = 5,
    odd.n_expert_used = 1, odd.n_layer = 3, odd.seed = 7, odd.tied_output = true;
    cases.push_back({"odd", odd});
    RandomModelOptions q8 = o;  // quantized matrices, MHA, top-4 of 9
    q8.n_embd = 64, q8.n_head = 4, q8.n_head_kv = 4, q8.head_dim = 16, q8.n_expert = 9,
    q8.n_expert_used = 4, q8.n_ff_expert = 32, q8.dtype = DType::kQ8_0, q8.seed = 3;
    if (q8.n_ff_shared) q8.n_ff_shared = 64;  // Q8_0 rows hold whole 32-element blocks
    cases.push_back({"q8", q8});
    if (a == Arch::kLlama) {  // a Llama 3 MoE merge: per-pair RoPE frequency divisors
      RandomModelOptions llama3 = o;
      llama3.rope_freq_factors = true;
      llama3.seed = 11;
      cases.push_back({"rope_freqs", llama3});
    }
  }
  // ERNIE-4.5 MoE: a leading dense layer, then experts every second layer (dense between),
  // softmax routing chosen with a selection bias, two shared experts' width.
  RandomModelOptions ernie;
  ernie.arch = Arch::kErnie45Moe;
  ernie.n_layer = 5, ernie.n_layer_dense = 1, ernie.n_ff_dense = 72, ernie.moe_layer_step = 2;
  ernie.selection_bias = true, ernie.n_ff_shared = 80, ernie.seed = 13;
  cases.push_back({"ernie", ernie});
  RandomModelOptions ernie_q8 = ernie;  // experts in every layer, Q8_0, tied output
  ernie_q8.n_embd = 64, ernie_q8.head_dim = 16, ernie_q8.n_ff_expert = 32, ernie_q8.n_ff_dense = 96;
  ernie_q8.n_ff_shared = 64, ernie_q8.moe_layer_step = 1, ernie_q8.dtype = DType::kQ8_0;
  ernie_q8.tied_output = true, ernie_q8.seed = 19;
  cases.push_back({"ernie_q8", ernie_q8});
  // Granite-3.x MoE: its embedding, residual and logit multipliers and attention scale (those of
  // granite-3.0-1b-a400m but the attention scale, 1 / head_dim here), the head tied.
  RandomModelOptions granite;
  granite.arch = Arch::kGraniteMoe;
  granite.embedding_scale = 12.f, granite.residual_scale = 0.22f, granite.logit_scale = 6.f;
  granite.attention_scale = 1.f / 12, granite.tied_output = true, granite.seed = 31;
  cases.push_back({"granite", granite});
  // Milder multipliers than granite-3.0's, with Q8_0 weights.
  RandomModelOptions granite_q8 = granite;
  granite_q8.n_embd = 64, granite_q8.head_dim = 16, granite_q8.n_ff_expert = 32;
  granite_q8.embedding_scale = 2.f, granite_q8.residual_scale = 0.7f, granite_q8.logit_scale = 3.f;
  granite_q8.attention_scale = 0.3f, granite_q8.dtype = DType::kQ8_0, granite_q8.seed = 37;
  cases.push_back({"granite_q8", granite_q8});
  // Llama 4 (Scout's layout): chunks of 4 positions on three layers of four, the fourth without
  // RoPE and with the query temperature stepping every 3 positions (8192 in the real models), an
  // unweighted QK-norm after RoPE, one sigmoid-weighted expert per token whose weight scales its
  // input, a shared expert of the experts' width, Llama 3's RoPE divisors.
  RandomModelOptions llama4;
  llama4.arch = Arch::kLlama4;
  llama4.n_layer = 5, llama4.n_expert_used = 1, llama4.n_ff_shared = 40;
  llama4.attention_chunk = 4, llama4.temperature_floor = 3, llama4.rope_freq_factors = true;
  llama4.seed = 41;
  cases.push_back({"llama4", llama4});
  // Maverick's: experts every second layer (dense between), here two per token, Q8_0.
  RandomModelOptions llama4_q8 = llama4;
  llama4_q8.n_embd = 64, llama4_q8.head_dim = 16, llama4_q8.n_ff_expert = 32;
  llama4_q8.n_ff_shared = 32, llama4_q8.moe_layer_step = 2, llama4_q8.n_ff_dense = 64;
  llama4_q8.n_expert_used = 2, llama4_q8.dtype = DType::kQ8_0, llama4_q8.seed = 43;
  cases.push_back({"llama4_q8", llama4_q8});
  // Ling 2.0 (bailingmoe2): a leading dense layer, per-head QK-norm, NEOX RoPE over half of each
  // head, sigmoid routing with a selection bias among the best 2 of 4 expert groups,
  // renormalised and scaled by 2.5, a shared expert.
  RandomModelOptions ling;
  ling.arch = Arch::kBailingMoe2;
  ling.n_layer = 3, ling.n_layer_dense = 1, ling.n_ff_dense = 56, ling.n_expert = 8;
  ling.n_expert_used = 3, ling.n_ff_shared = 40, ling.rope_dim = 6, ling.qk_norm = QkNorm::kPerHead;
  ling.selection_bias = true, ling.expert_groups = 4, ling.expert_groups_used = 2;
  ling.norm_topk_prob = true, ling.routed_scale = 2.5f, ling.seed = 53;
  cases.push_back({"bailingmoe2", ling});
  RandomModelOptions ling_q8 = ling;  // Q8_0, MHA, top-4 among the best 3 of 4 groups
  ling_q8.n_embd = 64, ling_q8.n_head = 4, ling_q8.n_head_kv = 4, ling_q8.head_dim = 16;
  ling_q8.rope_dim = 8, ling_q8.n_ff_expert = 32, ling_q8.n_ff_shared = 32, ling_q8.n_ff_dense = 64;
  ling_q8.n_expert_used = 4, ling_q8.expert_groups = 4, ling_q8.expert_groups_used = 3;
  ling_q8.dtype = DType::kQ8_0, ling_q8.seed = 59;
  cases.push_back({"bailingmoe2_q8", ling_q8});
  // MiniMax-M2: an RMSNorm over the whole q and k projections, NEOX RoPE over half of each head,
  // sigmoid routing with a selection bias, renormalised, no shared expert.
  RandomModelOptions minimax;
  minimax.arch = Arch::kMinimaxM2;
  minimax.n_layer = 3, minimax.n_expert = 9, minimax.n_expert_used = 3, minimax.rope_dim = 6;
  minimax.qk_norm = QkNorm::kFull, minimax.selection_bias = true, minimax.seed = 67;
  cases.push_back({"minimax_m2", minimax});
  RandomModelOptions minimax_q8 = minimax;  // Q8_0, GQA 4:1, top-2
  minimax_q8.n_embd = 64, minimax_q8.n_head = 8, minimax_q8.head_dim = 16, minimax_q8.rope_dim = 8;
  minimax_q8.n_ff_expert = 32, minimax_q8.n_expert_used = 2, minimax_q8.dtype = DType::kQ8_0;
  minimax_q8.seed = 71;
  cases.push_back({"minimax_m2_q8", minimax_q8});
  // dots.llm1: Qwen3's attention, a leading dense layer, sigmoid routing with a selection bias
  // among the best 2 of 3 groups of 3 experts, renormalised, x 2.5, two shared experts' width.
  RandomModelOptions dots;
  dots.arch = Arch::kDots1;
  dots.n_layer = 3, dots.n_layer_dense = 1, dots.n_ff_dense = 56, dots.n_expert = 9;
  dots.n_expert_used = 3, dots.n_ff_shared = 80, dots.selection_bias = true;
  dots.expert_groups = 3, dots.expert_groups_used = 2, dots.norm_topk_prob = true;
  dots.routed_scale = 2.5f, dots.seed = 79;
  cases.push_back({"dots1", dots});
  // LFM2-MoE: short-convolution layers (kernel 3) around one attending layer of Qwen3's
  // attention, a leading dense layer, sigmoid routing with a selection bias, renormalised.
  RandomModelOptions lfm2;
  lfm2.arch = Arch::kLfm2Moe;
  lfm2.n_layer = 4, lfm2.short_conv_layers = {0, 1, 3}, lfm2.n_layer_dense = 1;
  lfm2.n_ff_dense = 56, lfm2.n_expert = 9, lfm2.selection_bias = true, lfm2.seed = 83;
  cases.push_back({"lfm2moe", lfm2});
  RandomModelOptions lfm2_q8 = lfm2;  // Q8_0, kernel 4, GQA 4:1, the attending layer first
  lfm2_q8.n_embd = 64, lfm2_q8.n_head = 8, lfm2_q8.head_dim = 16, lfm2_q8.n_ff_expert = 32;
  lfm2_q8.n_ff_dense = 64, lfm2_q8.short_conv_layers = {1, 2, 3}, lfm2_q8.short_conv_kernel = 4;
  lfm2_q8.dtype = DType::kQ8_0, lfm2_q8.seed = 89;
  cases.push_back({"lfm2moe_q8", lfm2_q8});
  // Hunyuan-A13B: a weighted per-head RMSNorm of q and k after NEOX RoPE, softmax routing
  // renormalised beside a shared expert.
  RandomModelOptions hunyuan;
  hunyuan.arch = Arch::kHunyuanMoe;
  hunyuan.n_layer = 3, hunyuan.n_expert = 9, hunyuan.n_ff_shared = 72, hunyuan.seed = 101;
  cases.push_back({"hunyuan_moe", hunyuan});
  RandomModelOptions hunyuan_q8 = hunyuan;  // Q8_0, GQA 4:1, top-2
  hunyuan_q8.n_embd = 64, hunyuan_q8.n_head = 8, hunyuan_q8.head_dim = 16;
  hunyuan_q8.n_ff_expert = 32, hunyuan_q8.n_ff_shared = 64, hunyuan_q8.n_expert_used = 2;
  hunyuan_q8.dtype = DType::kQ8_0, hunyuan_q8.seed = 103;
  cases.push_back({"hunyuan_moe_q8", hunyuan_q8});
  // Granite-4.0-H: Mamba-2 layers around an attention layer without RoPE, Granite's multipliers
  // (the residual one on the shared expert too), softmax routing beside a shared expert.
  RandomModelOptions granite_h;
  granite_h.arch = Arch::kGraniteHybrid;
  granite_h.n_layer = 3, granite_h.ssm_layers = {0, 2}, granite_h.n_ff_shared = 40;
  granite_h.embedding_scale = 2.f, granite_h.residual_scale = 0.5f, granite_h.logit_scale = 3.f;
  granite_h.attention_scale = 1.f / 12, granite_h.seed = 107;
  cases.push_back({"granitehybrid", granite_h});
  RandomModelOptions granite_h_q8 = granite_h;  // Q8_0, kernel 3, one group, the attention last
  granite_h_q8.n_embd = 64, granite_h_q8.n_head = 8, granite_h_q8.head_dim = 16;
  granite_h_q8.n_ff_expert = 32, granite_h_q8.n_ff_shared = 64, granite_h_q8.ssm_layers = {0, 1};
  granite_h_q8.ssm_conv_kernel = 3, granite_h_q8.ssm_groups = 1, granite_h_q8.ssm_state = 16;
  granite_h_q8.dtype = DType::kQ8_0, granite_h_q8.seed = 109;
  cases.push_back({"granitehybrid_q8", granite_h_q8});
  // DeepSeek-MoE: llama's attention, a leading dense layer, softmax routing neither renormalised
  // nor scaled, two shared experts of the experts' width.
  RandomModelOptions deepseek;
  deepseek.arch = Arch::kDeepseek;
  deepseek.n_layer = 3, deepseek.n_head = 4, deepseek.n_layer_dense = 1, deepseek.n_ff_dense = 56;
  deepseek.n_ff_shared = 80, deepseek.seed = 113;
  cases.push_back({"deepseek", deepseek});
  RandomModelOptions deepseek_q8 = deepseek;  // Q8_0, GQA 2:1, top-2
  deepseek_q8.n_embd = 64, deepseek_q8.n_head = 4, deepseek_q8.n_head_kv = 2;
  deepseek_q8.head_dim = 16, deepseek_q8.n_ff_expert = 32, deepseek_q8.n_ff_shared = 64;
  deepseek_q8.n_ff_dense = 64, deepseek_q8.n_expert_used = 2, deepseek_q8.dtype = DType::kQ8_0;
  deepseek_q8.seed = 127;
  cases.push_back({"deepseek_q8", deepseek_q8});
  // Nemotron-H MoE: layers of one part each (Mamba-2, attention without RoPE, ungated relu^2
  // experts beside a relu^2 shared expert), sigmoid routing with a selection bias, renormalised
  // and scaled by 2.5.
  RandomModelOptions nemotron;
  nemotron.arch = Arch::kNemotronHMoe;
  nemotron.n_layer = 6, nemotron.layer_pattern = "ME*EME", nemotron.n_ff_shared = 56;
  nemotron.selection_bias = true, nemotron.norm_topk_prob = true, nemotron.routed_scale = 2.5f;
  nemotron.seed = 131;
  cases.push_back({"nemotron_h_moe", nemotron});
  RandomModelOptions nemotron_q8 = nemotron;  // Q8_0, attention first, kernel 3, one group
  nemotron_q8.n_embd = 64, nemotron_q8.n_head = 8, nemotron_q8.head_dim = 16;
  nemotron_q8.n_ff_expert = 32, nemotron_q8.n_ff_shared = 64, nemotron_q8.n_layer = 5;
  nemotron_q8.layer_pattern = "*MEEM", nemotron_q8.ssm_conv_kernel = 3;
  nemotron_q8.ssm_groups = 1, nemotron_q8.ssm_state = 16, nemotron_q8.dtype = DType::kQ8_0;
  nemotron_q8.seed = 137;
  cases.push_back({"nemotron_h_moe_q8", nemotron_q8});
  RandomModelOptions super_latent = nemotron;  // Nemotron 3 Super's latent experts
  super_latent.moe_latent = 24, super_latent.seed = 139;
  cases.push_back({"nemotron_h_moe_latent", super_latent});
  RandomModelOptions super_q8 = nemotron_q8;
  super_q8.moe_latent = 32, super_q8.seed = 149;
  cases.push_back({"nemotron_h_moe_latent_q8", super_q8});
  // Qwen3.5-MoE: gated delta nets (4 value heads over 2 key heads) and gated attention with
  // per-head QK-norm and partial multimodal RoPE, softmax routing renormalised beside a shared
  // expert scaled by sigmoid(w . x).
  RandomModelOptions qwen35;
  qwen35.arch = Arch::kQwen35Moe;
  qwen35.n_layer = 4, qwen35.ssm_layers = {0, 1, 2}, qwen35.n_ff_shared = 40;
  qwen35.rope_dim = 6, qwen35.seed = 151;
  cases.push_back({"qwen35moe", qwen35});
  RandomModelOptions qwen35_q8 = qwen35;  // Q8_0, one key head, kernel 3, attention first
  qwen35_q8.n_embd = 64, qwen35_q8.n_head = 8, qwen35_q8.head_dim = 16, qwen35_q8.rope_dim = 8;
  qwen35_q8.n_ff_expert = 32, qwen35_q8.n_ff_shared = 64, qwen35_q8.ssm_layers = {1, 2};
  qwen35_q8.ssm_conv_kernel = 3, qwen35_q8.ssm_groups = 1, qwen35_q8.ssm_state = 16;
  qwen35_q8.dtype = DType::kQ8_0, qwen35_q8.seed = 157;
  cases.push_back({"qwen35moe_q8", qwen35_q8});
  // Qwen3-Next: as Qwen3.5-MoE with plain partial NEOX RoPE, its value heads grouped per key head
  // and beta and alpha from one matrix; 6 value heads over 2 key heads.
  RandomModelOptions qwen3next = qwen35;
  qwen3next.arch = Arch::kQwen3Next, qwen3next.ssm_heads = 6, qwen3next.seed = 163;
  cases.push_back({"qwen3next", qwen3next});
  RandomModelOptions qwen3next_q8 = qwen35_q8;
  qwen3next_q8.arch = Arch::kQwen3Next, qwen3next_q8.ssm_groups = 2, qwen3next_q8.seed = 167;
  cases.push_back({"qwen3next_q8", qwen3next_q8});
  return cases;
}

// The 2- and 3-bit K-quants (rows of whole 256-element super-blocks): Q2_K's min terms on two
// families, Q3_K's signed scales on the other two.
std::vector<Case> LowBitCases() {
  std::vector<Case> cases;
  for (Arch a : {Arch::kLlama, Arch::kQwen2Moe, Arch::kOlmoe, Arch::kQwen3Moe}) {
    RandomModelOptions k;
    k.arch = a;
    k.n_embd = 256, k.n_head = 4, k.n_head_kv = 2, k.head_dim = 64, k.n_expert = 5,
    k.n_expert_used = 2, k.n_ff_expert = 256, k.seed = 17;
    k.n_ff_shared = a == Arch::kQwen2Moe ? 256 : 0;
    k.dtype = a == Arch::kLlama || a == Arch::kOlmoe ? DType::kQ2_K : DType::kQ3_K;
    cases.push_back({k.dtype == DType::kQ2_K ? "q2_k" : "q3_k", k});
  }
  return cases;
}

// The other 32-value block types llama.cpp's files carry (Q4_1, and Q5_0 / Q5_1 / IQ4_NL, its
// fallbacks for rows that are not whole super-blocks) and IQ4_XS, each on a family whose
// matrices all take it.
std::vector<Case> Block32AndIq4Cases() {
  std::vector<Case> cases;
  struct TypeCase {
    Arch arch;
    DType dtype;
    const char* name;
  };
  const TypeCase kCases[] = {
      {Arch::kLlama, DType::kQ5_0, "q5_0"},     {Arch::kQwen2Moe, DType::kQ5_1, "q5_1"},
      {Arch::kOlmoe, DType::kQ4_1, "q4_1"},     {Arch::kQwen3Moe, DType::kIQ4_NL, "iq4_nl"},
      {Arch::kLlama, DType::kIQ4_XS, "iq4_xs"},
  };
  for (const TypeCase& c : kCases) {
    RandomModelOptions k;
    k.arch = c.arch;
    k.n_embd = 256, k.n_head = 4, k.n_head_kv = 2, k.head_dim = 64, k.n_expert = 5,
    k.n_expert_used = 2, k.n_ff_expert = 256, k.seed = 23;
    k.n_ff_shared = c.arch == Arch::kQwen2Moe ? 256 : 0;
    k.dtype = c.dtype;
    cases.push_back({c.name, k});
  }
  return cases;
}

class ForwardTest : public ::testing::TestWithParam<Case> {};

void ExpectReferenceLogits(const Case& c) {
  ModelSpec spec = MakeRandomModel(c.o);
  std::vector<int32_t> tokens = {3, 17, 96, 0, 42, 42, 7, 81, 5, 60, 11};
  std::vector<float> want = ReferenceForward(spec, tokens);
  auto model = Model::Create(std::move(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  const float tol = 1e-3f * MaxAbs(want);
  for (int threads : {1, 3}) {
    // Exact to the (dequantized) weights: the reference multiplies in F32 too.
    auto backend = CreateCpuBackend({threads, /*quantize_activations=*/false});
    Transformer tf(*model, backend.get());
    // One batch.
    auto cache = KvCacheFor(**model, 32, DType::kF32);
    std::vector<float> got;
    ASSERT_TRUE(tf.Forward(tokens, *cache, LogitsFor::kAll, &got).ok());
    EXPECT_LE(MaxDiff(got, want), tol) << c.name << " prefill, threads " << threads;
    // A short prefill, then one token at a time through the cache.
    auto cache2 = KvCacheFor(**model, 32, DType::kF32);
    std::vector<float> step, all;
    ASSERT_TRUE(tf.Forward({tokens.data(), 3}, *cache2, LogitsFor::kAll, &step).ok());
    all = step;
    for (size_t t = 3; t < tokens.size(); ++t) {
      ASSERT_TRUE(tf.Forward({&tokens[t], 1}, *cache2, LogitsFor::kLast, &step).ok());
      all.insert(all.end(), step.begin(), step.end());
    }
    EXPECT_LE(MaxDiff(all, want), tol) << c.name << " decode, threads " << threads;
  }
}

TEST_P(ForwardTest, PrefillAndDecodeMatchNaiveReference) { ExpectReferenceLogits(GetParam()); }

class LowBitForwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(LowBitForwardTest, PrefillAndDecodeMatchNaiveReference) {
  ExpectReferenceLogits(GetParam());
}

TEST_P(ForwardTest, F16KvCacheStaysCloseToF32) {
  ModelSpec spec = MakeRandomModel(GetParam().o);
  auto model = Model::Create(std::move(spec));
  ASSERT_TRUE(model.ok());
  // Exact activations: with 8-bit ones, the cache's rounding re-draws their rounding everywhere
  // after the first attention, and the test would measure that instead (about 1% of the logits
  // on these random models, as far from the reference as either run is).
  auto backend = CreateCpuBackend({2, /*quantize_activations=*/false});
  Transformer tf(*model, backend.get());
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> a, b;
  auto c32 = KvCacheFor(**model, 16, DType::kF32);
  auto c16 = KvCacheFor(**model, 16, DType::kF16);
  ASSERT_TRUE(tf.Forward(tokens, *c32, LogitsFor::kAll, &a).ok());
  ASSERT_TRUE(tf.Forward(tokens, *c16, LogitsFor::kAll, &b).ok());
  // Half precision keeps 11 significant bits: K/V rounding moves logits by well under 1%.
  EXPECT_LE(MaxDiff(a, b), 1e-2f * MaxAbs(a));
  EXPECT_GT(MaxDiff(a, b), 0.f) << "the F16 cache should round something";
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = std::string(ArchName(info.param.o.arch)) + "_" + info.param.name;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';  // "ernie4_5-moe"
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Architectures, ForwardTest, ::testing::ValuesIn(Cases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Architectures, LowBitForwardTest, ::testing::ValuesIn(LowBitCases()),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Block32AndIq4, LowBitForwardTest,
                         ::testing::ValuesIn(Block32AndIq4Cases()), CaseName);

// A Q8_0 KV cache (a scale per 32 values) stays close to F32, as F16 does; heads that are not a
// whole number of blocks are refused with a message.
TEST(ForwardKvTypeTest, Q8_0KvCacheStaysCloseToF32) {
  RandomModelOptions o;
  o.n_embd = 64, o.n_head = 4, o.n_head_kv = 2, o.head_dim = 32;
  auto model = Model::Create(MakeRandomModel(o));
  ASSERT_TRUE(model.ok());
  const HParams& h = (*model)->hp();
  auto backend = CreateCpuBackend(2);
  Transformer tf(*model, backend.get());
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> a, b, step;
  auto c32 = KvCacheFor(**model, 16, DType::kF32);
  auto c8 = KvCacheFor(**model, 16, DType::kQ8_0);
  ASSERT_TRUE(c8.ok()) << c8.status();
  ASSERT_TRUE(tf.Forward(tokens, *c32, LogitsFor::kAll, &a).ok());
  ASSERT_TRUE(tf.Forward({tokens.data(), 4}, *c8, LogitsFor::kAll, &b).ok());
  for (size_t t = 4; t < tokens.size(); ++t) {  // decode steps read the quantized rows back
    ASSERT_TRUE(tf.Forward({&tokens[t], 1}, *c8, LogitsFor::kLast, &step).ok());
    b.insert(b.end(), step.begin(), step.end());
  }
  ASSERT_EQ(a.size(), b.size());
  // 8 bits per value with a scale per 32: K/V rounding moves logits by about 1%.
  EXPECT_LE(MaxDiff(a, b), 3e-2f * MaxAbs(a));
  EXPECT_GT(MaxDiff(a, b), 0.f) << "Q8_0 should round something";
  EXPECT_EQ(c8->byte_size() * 32, c32->byte_size() * 34 / 4) << "34 bytes per 32 values";
  auto odd = KvCache::Create(h.n_layer, 16, h.n_head_kv, 16, DType::kQ8_0);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("multiple of 32"), std::string::npos);
}

TEST(ForwardErrorsTest, BadInputIsAnErrorAndLeavesTheCacheUntouched) {
  auto model = Model::Create(MakeRandomModel({}));
  ASSERT_TRUE(model.ok());
  const HParams& h = (*model)->hp();
  auto backend = CreateCpuBackend(1);
  Transformer tf(*model, backend.get());
  auto cache = KvCacheFor(**model, 4, DType::kF32);
  std::vector<float> logits;
  std::vector<int32_t> bad = {1, static_cast<int32_t>(h.n_vocab)};
  EXPECT_EQ(tf.Forward(bad, *cache, LogitsFor::kLast, &logits).code(),
            absl::StatusCode::kOutOfRange);
  std::vector<int32_t> negative = {-1};
  EXPECT_EQ(tf.Forward(negative, *cache, LogitsFor::kLast, &logits).code(),
            absl::StatusCode::kOutOfRange);
  std::vector<int32_t> too_long = {1, 2, 3, 4, 5};
  EXPECT_EQ(tf.Forward(too_long, *cache, LogitsFor::kLast, &logits).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->size(), 0);
  EXPECT_TRUE(tf.Forward({1, 2, 3, 4}, *cache, LogitsFor::kLast, &logits).ok());
  EXPECT_EQ(tf.Forward({5}, *cache, LogitsFor::kLast, &logits).code(),
            absl::StatusCode::kResourceExhausted);
}

// A cancellation point between layers: the step ends Cancelled at the layer it was asked
// before, the cache's size is unchanged, and the next steps give what an uncancelled run gives.
TEST(ForwardCancelTest, StopsBetweenLayersAndLeavesTheCacheAsItWas) {
  RandomModelOptions o;
  o.n_layer = 3;
  auto model = Model::Create(MakeRandomModel(o));
  ASSERT_TRUE(model.ok());
  auto backend = CreateCpuBackend(1);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5}, next = {9};
  std::vector<float> want, got;
  {
    Transformer tf(*model, backend.get());
    auto cache = KvCacheFor(**model, 16, DType::kF32);
    ASSERT_TRUE(tf.Forward(prompt, *cache, LogitsFor::kLast, &want).ok());
    ASSERT_TRUE(tf.Forward(next, *cache, LogitsFor::kLast, &want).ok());
  }
  Transformer tf(*model, backend.get());
  int asked = 0;
  bool cancel = true;
  tf.set_cancel_check([&] { return ++asked == 2 && cancel; });  // before layer 2
  auto cache = KvCacheFor(**model, 16, DType::kF32);
  const absl::Status s = tf.Forward(prompt, *cache, LogitsFor::kLast, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(std::string(s.message()).find("layer 2"), std::string::npos) << s;
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(cache->size(), 0);
  cancel = false;
  ASSERT_TRUE(tf.Forward(prompt, *cache, LogitsFor::kLast, &got).ok());
  ASSERT_TRUE(tf.Forward(next, *cache, LogitsFor::kLast, &got).ok());
  EXPECT_EQ(got, want);
}

TEST(ForwardTelemetryTest, CountsEveryRoutedTokenOnce) {
  RandomModelOptions o;
  auto model = Model::Create(MakeRandomModel(o));
  ASSERT_TRUE(model.ok());
  auto backend = CreateCpuBackend(1);
  Transformer tf(*model, backend.get());
  auto cache = KvCacheFor(**model, 16, DType::kF32);
  Telemetry tel;
  std::vector<float> logits;
  ASSERT_TRUE(tf.Forward({4, 8, 15, 16, 23, 42}, *cache, LogitsFor::kLast, &logits, &tel).ok());
  EXPECT_EQ(tel.tokens, 6);
  for (const auto& layer : tel.expert_counts) {
    int64_t sum = 0;
    for (int64_t c : layer) sum += c;
    EXPECT_EQ(sum, 6 * o.n_expert_used);
  }
  EXPECT_GT(tel.router_entropy_sum, 0);
}

TEST(ForwardMaskTest, DisabledExpertsAreNeverChosen) {
  auto model = Model::Create(MakeRandomModel({}));
  ASSERT_TRUE(model.ok());
  const HParams& h = (*model)->hp();
  auto backend = CreateCpuBackend(1);
  Transformer tf(*model, backend.get());
  std::vector<std::vector<bool>> disabled(h.n_layer, std::vector<bool>(h.n_expert, false));
  disabled[0][0] = disabled[0][1] = disabled[1][h.n_expert - 1] = true;
  tf.set_disabled_experts(disabled);
  auto cache = KvCacheFor(**model, 16, DType::kF32);
  Telemetry tel;
  std::vector<float> logits;
  ASSERT_TRUE(
      tf.Forward({1, 2, 3, 4, 5, 6, 7, 8, 9}, *cache, LogitsFor::kLast, &logits, &tel).ok());
  EXPECT_EQ(tel.expert_counts[0][0], 0);
  EXPECT_EQ(tel.expert_counts[0][1], 0);
  EXPECT_EQ(tel.expert_counts[1][h.n_expert - 1], 0);
}

}  // namespace
}  // namespace moe
