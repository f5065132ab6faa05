// Metadata rules several families share, each with llama.cpp's meaning of the GGUF keys.
#pragma once

#include "absl/status/status.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/architecture.h"

namespace moe {

struct RoutingDefaults {
  Gating gating;
  bool norm_topk_prob;
};

// expert_gating_func (1 softmax, 2 sigmoid), expert_weights_norm, expert_weights_scale,
// expert_group_count / expert_group_used_count.
absl::Status ReadRouting(const MetadataKeys& keys, RoutingDefaults defaults, HParams* h);

// expert_weights_scale (absent or 0, llama.cpp's "unset": 1), for families whose routing is
// otherwise fixed (part of ReadRouting).
absl::Status ReadRoutedScale(const MetadataKeys& keys, HParams* h);

// ssm.conv_kernel, inner_size, state_size, time_step_rank (the heads) and group_count: the sizes
// of Mamba-2 layers (granitehybrid, nemotron_h_moe).
absl::Status ReadMamba2Sizes(const MetadataKeys& keys, HParams* h);

// Qwen3-Next's and Qwen3.5-MoE's shared keys and what they imply: gated attention with per-head
// QK-norm and NEOX-paired RoPE, softmax routing renormalised beside a sigmoid-gated shared expert
// (expert_shared_feed_forward_length), the gated delta nets' ssm.* sizes, the MTP block skipped,
// and the layers that are delta nets (attention.recurrent_layers, else all but every
// full_attention_interval-th, as llama.cpp).
absl::Status ReadQwenDeltaNetHybrid(absl::string_view family, const MetadataKeys& keys, HParams* h);
// Such a family's layer: a gated delta net (a recurrent layer) or gated attention, then experts
// after post_attention_norm.
LayerParts QwenDeltaNetHybridLayer(const HParams& h, int layer);

// rope.dimension_sections: the four section sizes of llama.cpp's interleaved multimodal RoPE
// (qwen3vlmoe, qwen35moe), required.
absl::Status ReadRopeSections(absl::string_view family, const MetadataKeys& keys, HParams* h);

// leading_dense_block_count layers with a dense FFN of feed_forward_length.
absl::Status ReadLeadingDenseLayers(const MetadataKeys& keys, HParams* h);

// interleave_moe_layer_step: experts only in every step-th layer (after the leading dense ones),
// the layers between with the dense FFN of feed_forward_length.
absl::Status ReadExpertLayerStep(const MetadataKeys& keys, HParams* h);

// expert_shared_count shared experts of expert_feed_forward_length each, run as one FFN.
absl::Status ReadSharedExperts(const MetadataKeys& keys, HParams* h);

// nextn_predict_layers: the multi-token-prediction blocks after the last layer, which are
// carried by the file but not run: block_count counts them, n_layer does not.
absl::Status ReadNextnLayers(const MetadataKeys& keys, HParams* h);

// The families whose RoPE turns the whole head (llama.cpp asserts it for them): an error naming
// `family` when the file's rope.dimension_count says less.
absl::Status RequireWholeHeadRope(absl::string_view family, const HParams& h);

// Routing fixed by the family, not by keys (llama.cpp's ERNIE and Granite graphs): softmax over
// the experts, the chosen ones' weights renormalised, no extra scale.
void SoftmaxRenormalisedRouting(HParams* h);

// Granite's muP-style multipliers (embedding_scale, residual_scale, logit_scale) and its own
// attention scale (attention.scale, 0: 1 / sqrt(head_dim)). The multipliers default to 1 as in
// Hugging Face's Granite configs; llama.cpp writes 0 for "none" where the key is optional.
absl::Status ReadGraniteMultipliers(const MetadataKeys& keys, HParams* h);

// q/k/v and output-projection biases where the file has them (the first attending layer tells;
// ValidateModelSpec then expects them in every attending layer).
void AttentionBiasesFromTensors(const ModelSpec& spec, HParams* h);

// A family whose QK-norm is optional has it when the file has its weights: per head when they
// are head_dim long, over the whole projection when they are n_head x head_dim.
QkNorm QkNormFromTensors(const ModelSpec& spec, const HParams& h);

}  // namespace moe
