// A loaded model ready to run: the ModelSpec plus its tensors resolved into per-layer weights.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/backend/weight_view.h"
#include "lib/model/arch/architecture.h"
#include "lib/model/model_spec.h"

namespace moe {

struct ExpertWeights {
  WeightView gate, up, down;         // [ff x embd], [ff x embd], [embd x ff]
  const float* gate_bias = nullptr;  // [ff], [ff], [embd], when the architecture has them
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  size_t byte_size() const { return gate.byte_size() + up.byte_size() + down.byte_size(); }
  // An expert another rank holds has no views here, only what running it costs there.
  int64_t remote_bytes = 0;
  int64_t remote_params = 0;
  // Whether the expert's weights are here (not pruned, not another rank's); an ungated expert's
  // gate is empty.
  bool has_weights() const { return !down.empty(); }
  // What one token running the expert reads and multiplies, wherever it runs.
  int64_t cost_bytes() const {
    return has_weights() ? static_cast<int64_t>(byte_size()) : remote_bytes;
  }
  int64_t params() const {
    return has_weights() ? gate.rows * gate.cols + up.rows * up.cols + down.rows * down.cols
                         : remote_params;
  }
};

struct LayerWeights {
  LayerParts parts;  // what the layer is made of (its architecture's file says)
  const float* attn_norm = nullptr;
  WeightView wq, wk, wv, wo;
  const float* bq = nullptr;  // biases, when the architecture has them
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* bo = nullptr;      // of the output projection
  const float* sinks = nullptr;   // [n_head] attention-sink logits
  const float* q_norm = nullptr;  // QK-norm weights, when the architecture has them
  const float* k_norm = nullptr;
  // Latent attention: q through the optional low-rank pair (wq_a, q_a_norm, wq_b) or wq; the
  // latent and the shared RoPE key from wkv_a; per head, wk_b [n_head x rank x nope] and
  // wv_b [n_head x v_head x rank] as stacked rows.
  WeightView wq_a, wq_b, wkv_a, wk_b, wv_b;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  // A short convolution: its in-projection [3 embd x embd] (B, C and X; wo is its
  // out-projection) and depthwise kernel [embd x kernel length].
  WeightView conv_in;
  const float* conv_kernel = nullptr;
  // A Mamba-2 mixer (HParams' ssm_*; wo is its out-projection): the in-projection to z, xBC and
  // dt, the depthwise kernel [channels x kernel length] and its bias, dt's bias, A and D per
  // head, the grouped norm's weight [inner].
  WeightView ssm_in;
  const float* ssm_conv = nullptr;
  const float* ssm_conv_bias = nullptr;
  const float* ssm_dt_bias = nullptr;
  const float* ssm_a = nullptr;
  const float* ssm_d = nullptr;
  const float* ssm_norm = nullptr;
  // A gated delta net (HParams' ssm_*; ssm_in is attn_qkv, to the convolved q, k and v; ssm_conv
  // its kernel, without bias; ssm_dt_bias, ssm_a per value head; ssm_norm [value head size]; wo
  // its out-projection): the output gate z, and beta and alpha per value head (with
  // HParams::ssm_grouped_heads both in ssm_beta, ssm_ba's rows, and ssm_alpha empty).
  WeightView ssm_z, ssm_beta, ssm_alpha;
  const float* ffn_norm = nullptr;
  ExpertWeights dense;                    // a dense layer's FFN
  WeightView router;                      // [n_expert x embd]
  const float* selection_bias = nullptr;  // [n_expert], when the routing has one
  const float* router_bias = nullptr;     // [n_expert], added to the logits (gpt-oss)
  std::vector<ExpertWeights> experts;
  bool has_shared = false;
  ExpertWeights shared;
  WeightView shared_gate;  // [1 x embd], when the shared expert is gated
  // Latent experts (HParams::moe_latent_dim): [latent x embd] and [embd x latent].
  WeightView latent_down, latent_up;
  size_t dense_bytes = 0;  // every weight byte of the layer a token reads besides routed experts
};

class Model {
 public:
  static absl::StatusOr<std::shared_ptr<const Model>> Create(ModelSpec spec);

  const ModelSpec& spec() const { return spec_; }
  // The F32 copies of the 1-D tensors (norms, biases, sinks) the layers point at; with the
  // spec's matrices, every byte a forward pass reads (what a device backend uploads).
  const std::vector<std::vector<float>>& vectors() const { return f32_vectors_; }
  const HParams& hp() const { return spec_.hp; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Each layer's attention window (0: the whole context), for KV caches that keep only it.
  const std::vector<int64_t>& attention_windows() const { return attention_windows_; }
  // Per layer, the width of the rows a convolution layer (short or Mamba-2's) carries instead
  // of K and V (0: an attention layer; kNoKvRows: a layer that keeps nothing); empty when no
  // layer convolves. With conv_rows and state_floats, a KV cache's shape.
  const std::vector<int64_t>& conv_widths() const { return conv_widths_; }
  // Per layer, the rows a convolution layer carries: its kernel's length - 1 (else 0).
  const std::vector<int64_t>& conv_rows() const { return conv_rows_; }
  // Per layer, the F32 values of a recurrent layer's state (0: none); empty when no layer has
  // one. Such a layer's conv_widths entry is its convolution's.
  const std::vector<int64_t>& state_floats() const { return state_floats_; }
  const WeightView& token_embd() const { return token_embd_; }
  const WeightView& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  // rope_dim / 2 divisors of the pairs' frequencies (the file's rope_freqs; +inf for a pair that
  // does not turn for text under multimodal RoPE); null: none.
  const float* rope_freq_factors() const { return rope_freq_factors_; }
  // [layer][expert]: experts pruned from the file (ModelSpec::pruned_experts), which the router
  // never picks and which have no weights.
  const std::vector<std::vector<bool>>& pruned_experts() const { return pruned_; }

 private:
  Model() = default;
  absl::Status Resolve();
  absl::Status ResolveGroupedQueryAttention(int layer, LayerWeights& L);
  // The layer's routed experts (those this spec holds) and their stacked biases.
  absl::Status ResolveExperts(int layer, LayerWeights& L);
  // rope_freq_factors_: the file's rope_freqs and, with multimodal RoPE, +inf for the pairs that
  // do not turn for text.
  absl::Status ResolveRopeDivisors();
  absl::StatusOr<const float*> Vector(const std::string& name);
  absl::StatusOr<WeightView> Matrix(const std::string& name);
  // The tensor of that name (null if none), marked used.
  const TensorSpec* Use(const std::string& name);
  // llama.cpp refuses a file with a tensor it does not read; so does libmoe, rather than run a
  // variant (llama-3 RoPE factors, per-tensor scales) as if the tensor were not there.
  absl::Status CheckEveryTensorUsed() const;

  ModelSpec spec_;
  std::vector<LayerWeights> layers_;
  std::vector<int64_t> attention_windows_;
  std::vector<int64_t> conv_widths_;
  std::vector<int64_t> conv_rows_;
  std::vector<int64_t> state_floats_;
  std::vector<std::vector<bool>> pruned_;
  std::vector<std::vector<bool>> weightless_;  // ModelSpec::WeightlessMask, while resolving
  WeightView token_embd_, output_;
  const float* output_norm_ = nullptr;
  const float* rope_freq_factors_ = nullptr;
  std::vector<std::vector<float>> f32_vectors_;  // 1-D tensors converted to F32
  std::vector<bool> used_;                       // per spec_.tensors, while resolving
};

}  // namespace moe
