// Test support: random-weight models of any supported shape built in memory, and a naive
// reference forward pass written directly from the architectures' definitions (Hugging Face
// transformers' Mixtral/Qwen2-MoE/OLMoE/Qwen3-MoE/ERNIE/Granite/Llama-4/NemotronH modeling code):
// no KV cache, no backend, no batching tricks — full causal attention recomputed for every
// position.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/model/model_spec.h"

namespace moe::testing {

struct RandomModelOptions {
  Arch arch = Arch::kQwen3Moe;
  int64_t n_vocab = 97, n_embd = 48, n_layer = 2, n_head = 6, n_head_kv = 2, head_dim = 12;
  int64_t n_expert = 7, n_expert_used = 3, n_ff_expert = 40, n_ff_shared = 0;
  uint32_t seed = 1;
  DType dtype = DType::kF32;  // of the 2-D matrices
  bool tied_output = false;
  bool rope_freq_factors = false;  // a rope_freqs tensor (Llama 3's per-pair divisors)
  // Dense SwiGLU FFNs of n_ff_dense in the first n_layer_dense layers and, after them, in every
  // layer l with (l + 1) % moe_layer_step != 0 (ERNIE-4.5's moe_layer_interval).
  int64_t n_layer_dense = 0, n_ff_dense = 0, moe_layer_step = 1;
  // exp_probs_b: a per-expert bias added to the scores that choose the experts, not to weights.
  bool selection_bias = false;
  // Granite's multipliers (1: none) and attention scale (0: 1 / sqrt(head_dim)).
  float embedding_scale = 1.f, residual_scale = 1.f, logit_scale = 1.f, attention_scale = 0.f;
  // Llama 4's chunk size and query-temperature floor in place of the family's 8192 (0: keep),
  // so that a short test sequence crosses chunks and temperature steps.
  int64_t attention_chunk = 0, temperature_floor = 0;
  // RoPE over the first rope_dim of each head (0: all of it; NEOX families pair i with
  // i + rope_dim / 2), and an RMSNorm with a weight of q and k before it, per head or over the
  // whole projection, where the family's is optional (unset: as the family implies).
  int64_t rope_dim = 0;
  std::optional<QkNorm> qk_norm;
  // DeepSeek-V3-style selection: the experts of the expert_groups_used best of expert_groups
  // groups (a group scores the sum of its two best), the chosen weights renormalised (or not, as
  // the family implies when unset) and scaled by routed_scale.
  int64_t expert_groups = 1, expert_groups_used = 1;
  std::optional<bool> norm_topk_prob;
  // LFM2's short-convolution layers (the others attend) and their kernel's length.
  std::vector<int64_t> short_conv_layers;
  int64_t short_conv_kernel = 3;
  float routed_scale = 1.f;
  // granitehybrid's Mamba-2 layers (the others attend): inner size 2 x n_embd in ssm_heads heads,
  // B and C in ssm_groups groups of ssm_state.
  std::vector<int64_t> ssm_layers;
  int64_t ssm_conv_kernel = 4, ssm_state = 8, ssm_heads = 4, ssm_groups = 2;
  // nemotron_h_moe's layers of one part each: M (Mamba-2, of the sizes above), * (attention), E
  // (ungated relu^2 experts beside a shared expert of n_ff_shared).
  std::string layer_pattern;
  // Nemotron 3 Super's latent experts: their rows of this size (0: none).
  int64_t moe_latent = 0;
};

// A ModelSpec owning its random weights; semantics flags are what the family implies.
ModelSpec MakeRandomModel(const RandomModelOptions& o);

// Logits [n_tokens x n_vocab] for the whole sequence, by the naive reference.
std::vector<float> ReferenceForward(const ModelSpec& spec, const std::vector<int32_t>& tokens);

}  // namespace moe::testing
