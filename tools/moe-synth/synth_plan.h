// What moe-synth writes for each architecture: the family's GGUF hyper-parameter keys and the
// list of tensors with their shapes and the spread of their random values, named and laid out
// as llama.cpp's converters write them, so that both engines load the very same file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/import/gguf_writer.h"

namespace moe::synth {

struct Shape {
  std::string arch = "qwen2moe";
  int64_t embd = 1024, layers = 16, heads = 16, kv_heads = 4, head_dim = 0;  // 0: embd / heads
  int64_t experts = 32, top_k = 4, ff = 512;
  int64_t shared_ff = 2048;  // qwen2moe's gated shared expert; the others size theirs by ff
  int64_t shared_experts = 1;
  int64_t dense_layers = 1, dense_ff = 0;  // glm4moe, deepseek2, ernie4_5-moe; 0: 4 x ff
  int64_t moe_layer_step = 1;  // ernie4_5-moe: experts every this many layers after the dense
  int64_t ctx = 4096;
  float rope_base = 1e6f;
  // deepseek2's latent attention: q_lora 0 is V2-Lite's q straight from attn_q.
  int64_t q_lora = 0, kv_lora = 512, qk_nope = 128, qk_rope = 64, v_head = 128;
  // deepseek2 V3-style routing: sigmoid with a selection bias, in groups.
  bool sigmoid_routing = false;
  int64_t expert_groups = 1, expert_groups_used = 1;
  int64_t sliding_window = 128;  // gpt-oss
  bool qk_norm = false;          // glm4moe: RMSNorm of each q and k head (GLM-4.5's use_qk_norm)
  // lfm2moe, granitehybrid: the layers that attend (the others convolve or run Mamba-2; empty:
  // every fourth from the third, as LFM2-8B-A1B's first five) and the convolution's kernel
  // length (0: the family's, 3 for lfm2moe and 4 for granitehybrid).
  std::vector<int64_t> attention_layers;
  int64_t conv_kernel = 0;
  // granitehybrid's Mamba-2 layers: state size, head size, groups (the inner size is 2 x embd,
  // as llama.cpp requires).
  int64_t ssm_state = 128, ssm_head_dim = 64, ssm_groups = 1;
  // nemotron_h_moe: each layer's one part, M (Mamba-2), * (attention) or E (experts); empty:
  // Nemotron-3-Nano's pattern cut to `layers`.
  std::string layer_pattern;
  int64_t moe_latent = 0;  // nemotron_h_moe: the routed experts' latent size (0: none)
  // qwen35moe's gated delta nets: value heads (0: twice ssm_groups, the key heads), each
  // ssm_state wide; every full_attention_interval-th layer attends.
  int64_t ssm_heads = 0;
  int64_t full_attention_interval = 4;
};

// A tensor to fill with normal values of `mean` and `std`; `shape` is outermost first.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  float std = 0;
  float mean = 0;
  int64_t layer = -1;
};

// The architectures moe-synth writes, as GGUF names them.
const std::vector<std::string>& Architectures();

// The final norm's tensor name (lfm2moe's files call it token_embd_norm).
std::string OutputNormName(const Shape& s);

// Writes the family's hyper-parameter keys into `w` and returns its tensors, or an error naming
// the option that does not fit the family (a head size the latent attention cannot split, ...).
absl::StatusOr<std::vector<Tensor>> Plan(const Shape& s, GgufWriter& w);

}  // namespace moe::synth
