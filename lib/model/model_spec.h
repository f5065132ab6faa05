// The in-memory description of a model as files carry it: architecture, hyper-parameters,
// tokenizer and a table of named tensors. Importers produce it, the .moe container stores it,
// and the runtime builds its Model from it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "lib/base/dtype.h"
#include "lib/moe/gating.h"
#include "lib/tokenizer/tokenizer_data.h"

namespace moe {

// Architectures, named as llama.cpp names them. "llama" here means the Mixtral layout (a llama
// block whose FFN is a mixture of experts). What each one is made of lives in lib/model/arch/.
enum class Arch {
  kLlama,
  kQwen2Moe,
  kOlmoe,
  kQwen3Moe,
  kGlm4Moe,
  kDeepseek2,
  kGptOss,
  kQwen3VlMoe,
  kErnie45Moe,
  kGraniteMoe,
  kLlama4,
  kBailingMoe2,
  kMinimaxM2,
  kDots1,
  kLfm2Moe,
  kHunyuanMoe,
  kGraniteHybrid,
  kDeepseek,
  kNemotronHMoe,
  kQwen35Moe,
  kQwen3Next,
};

absl::string_view ArchName(Arch a);
absl::StatusOr<Arch> ArchFromName(absl::string_view name);

enum class RopeStyle { kNorm, kNeox };         // rotate (2i, 2i+1) vs (i, i + dim/2)
// RMSNorm of the whole q/k vector or per head, with a weight; or per head without one, after
// RoPE and on the RoPE layers only (Llama 4's L2 norm); or per head with a weight after RoPE
// (Hunyuan's).
enum class QkNorm { kNone, kFull, kPerHead, kPerHeadUnweighted, kPerHeadAfterRope };

struct HParams {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // of q and k (and v)
  int64_t n_ctx_train = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared = 0;  // 0 = no shared expert
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.f;
  int64_t rope_dim = 0;  // dimensions rotated per head, the first ones (<= head_dim)
  RopeStyle rope_style = RopeStyle::kNorm;
  QkNorm qk_norm = QkNorm::kNone;
  bool norm_topk_prob = true;  // renormalise the top-k router weights to sum 1
  bool has_qkv_bias = false;
  bool shared_expert_gate = false;  // sigmoid(w . x) scales the shared expert
  bool tied_output = false;         // logits use token_embd when there is no output.weight
  // The first n_layer_dense layers have a dense SwiGLU FFN of width n_ff_dense, no experts.
  int64_t n_layer_dense = 0;
  int64_t n_ff_dense = 0;
  // After them, experts in every moe_layer_step-th layer (layer l when (l + 1) % step == 0, as
  // ERNIE-4.5's moe_layer_interval); the layers between have the dense FFN. 1: every layer.
  int64_t moe_layer_step = 1;
  Gating gating = Gating::kSoftmax;
  // exp_probs_b: a per-expert bias added to the scores to choose experts, not to weight them.
  bool has_selection_bias = false;
  float routed_scale = 1.f;  // the chosen experts' weights are multiplied by it
  // Group-limited choice: experts fall in n_expert_groups groups, each scored by the sum of its
  // best two; only the best n_group_used groups' experts may be chosen. 1 group: no limit.
  int64_t n_expert_groups = 1;
  int64_t n_group_used = 1;
  // Multi-token-prediction blocks a file carries after the n_layer that run (not loaded).
  int64_t n_nextn_layer = 0;
  // YaRN context extension (rope.scaling.type yarn): factor 1 is none.
  float yarn_factor = 1.f;
  int64_t yarn_orig_ctx = 0;
  float yarn_beta_fast = 32.f;
  float yarn_beta_slow = 1.f;
  // DeepSeek's attention temperature: scores scale by mscale^2, mscale = 1 + this x ln(factor).
  float yarn_log_mul = 0.f;
  float rope_attn_factor = 1.f;  // cos and sin magnitude, before YaRN's own 1 + 0.1 ln(factor)
  // Attention scores are scaled by this; 0: 1 / sqrt(the key size).
  float kq_scale = 0.f;
  // The value dimension the file states (attention.value_length; 0: not stated, head_dim);
  // == head_dim but for latent attention, where it is the latent's.
  int64_t value_dim = 0;
  // Multi-head latent attention (DeepSeek-V2/V3), when kv_lora_rank > 0. The cache holds one
  // "KV head" of head_dim = kv_lora_rank + rope_dim values per token (the normalised latent and
  // the shared RoPE key), whose first kv_lora_rank values are also its values.
  int64_t q_lora_rank = 0;  // 0: q straight from attn_q
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;  // per head: the position-free part of q and k
  int64_t v_head_dim = 0;   // per head: the values' size after attn_v_b

  // gpt-oss: an output-projection bias, one attention-sink logit per head, a sliding window on
  // the layers the period picks (layer l slides when l % swa_period < swa_period - 1, llama.cpp's
  // rule), biases on the router and on every expert's three products, the clamped SwiGLU.
  bool has_attn_out_bias = false;
  bool has_attn_sinks = false;
  int64_t sliding_window = 0;  // 0: every layer attends to the whole context
  int64_t swa_period = 0;
  // Llama 4: the layers that "slide" attend within fixed chunks of sliding_window positions
  // instead (a query at p sees p - p % sliding_window .. p).
  bool window_chunked = false;
  // Llama 4's NoPE layers: layer l has no RoPE when (l + 1) % nope_period == 0 (0: none). Their
  // queries are scaled by 1 + attn_temp_scale * ln(floor((p + attn_temp_offset) /
  // attn_temp_floor) + 1) at position p (attn_temp_scale 0: not).
  int64_t nope_period = 0;
  float attn_temp_scale = 0.f;
  int64_t attn_temp_floor = 0;
  float attn_temp_offset = 0.f;
  // Llama 4: each chosen expert's input is its token's input times the router weight, and its
  // output joins unweighted (the weight inside the SwiGLU, not after it).
  bool expert_input_weighted = false;
  bool has_router_bias = false;
  bool has_expert_bias = false;
  bool swiglu_clamped = false;

  // Granite's multipliers: the token embeddings are multiplied by embedding_scale, each
  // attention and feed-forward output by residual_scale before it joins the residual stream, and
  // the logits divided by logit_scale. 1: none.
  float embedding_scale = 1.f;
  float residual_scale = 1.f;
  float logit_scale = 1.f;

  // Multimodal RoPE (qwen3vlmoe's interleaved M-RoPE, llama.cpp's IMROPE): how many rotary pairs
  // follow the temporal, height, width and extra positions; all 0: plain RoPE. For text, the
  // runtime's only input, the first three are the token's position and the extra one is 0.
  std::array<int64_t, 4> rope_sections{};

  // LFM2's short-convolution layers (the others attend): such a layer mixes each channel over
  // its last short_conv_kernel positions (a depthwise causal convolution) instead of attending.
  // short_conv_layers lists them in order; empty: none.
  int64_t short_conv_kernel = 0;
  std::vector<int64_t> short_conv_layers;

  // Mamba-2 layers (granitehybrid; the others attend), listed in order in ssm_layers. Such a layer
  // projects its normalised rows to z [ssm_inner], xBC [ssm_inner + 2 ssm_groups ssm_state] and
  // dt [ssm_heads]; xBC is convolved causally per channel over its last ssm_conv_kernel positions
  // (with a bias, then SiLU) and split into x, B and C; each head's state [head_dim x ssm_state]
  // decays by exp(softplus(dt + dt_bias) A) and takes x B; the output C . state + D x, gated by
  // silu(z), RMS-normed per group, is projected back. The state is carried from token to token.
  int64_t ssm_conv_kernel = 0;
  int64_t ssm_inner = 0;
  int64_t ssm_state = 0;
  int64_t ssm_heads = 0;
  int64_t ssm_groups = 0;
  std::vector<int64_t> ssm_layers;
  // In a gated-delta-net family (qwen35moe) the ssm_layers are gated delta nets instead, sized by
  // the same keys as llama.cpp reads them: ssm_groups heads of keys and queries, ssm_heads of
  // values, each ssm_state wide (ssm_inner = ssm_heads x ssm_state); the convolved channels are
  // q, k and v; each value head's state [ssm_state x ssm_state] decays by exp(softplus(alpha +
  // dt_bias) A), and is corrected towards v along k by sigmoid(beta) (the delta rule); the
  // output S^T q, RMS-normed per head and gated by silu(z), is projected back. Value head h
  // reads key head h mod ssm_groups (qwen35moe: llama.cpp's converter lays the value heads out
  // so), or with ssm_grouped_heads key head h / (ssm_heads / ssm_groups) (qwen3next), whose
  // beta and alpha then come from one matrix, ssm_ba, in rows per key head: its value heads'
  // betas, then their alphas.
  bool ssm_grouped_heads = false;

  // Attention layers whose q projection also yields an output gate per head (Qwen3.5's
  // attn_q rows: each head's q, then its gate): the attention's output is multiplied by
  // sigmoid(gate) before attn_output.
  bool attention_output_gate = false;

  // Layers of a single part (Nemotron-H): a mixer-only layer runs its attention or Mamba-2 mixer
  // and no feed-forward part; a feed-forward-only layer runs its feed-forward part alone, normed
  // by attn_norm, and caches nothing. Each list in order; empty: every layer has both parts.
  std::vector<int64_t> mixer_only_layers;
  std::vector<int64_t> ffn_only_layers;
  // Feed-forward blocks without a gate (Nemotron-H), routed and shared: down(relu(up x)^2).
  bool relu_squared_ffn = false;
  // Latent experts (Nemotron 3 Super's moe_latent_size; 0: none): the routed experts run on the
  // normalised input projected down to this size (ffn_latent_down), their weighted sum is
  // projected back up (ffn_latent_up); the router and the shared expert read the full input.
  int64_t moe_latent_dim = 0;
  // The size of the routed experts' input and output rows.
  int64_t expert_dim() const { return moe_latent_dim > 0 ? moe_latent_dim : n_embd; }

  bool latent_attention() const { return kv_lora_rank > 0; }
  bool multimodal_rope() const {
    return rope_sections[0] + rope_sections[1] + rope_sections[2] + rope_sections[3] > 0;
  }
  bool layer_has_experts(int layer) const {
    return layer >= n_layer_dense && (layer + 1) % moe_layer_step == 0 && !layer_mixer_only(layer);
  }
  bool layer_mixer_only(int layer) const {
    return std::binary_search(mixer_only_layers.begin(), mixer_only_layers.end(), layer);
  }
  bool layer_ffn_only(int layer) const {
    return std::binary_search(ffn_only_layers.begin(), ffn_only_layers.end(), layer);
  }
  bool layer_slides(int layer) const {
    return sliding_window > 0 && swa_period > 0 && layer % swa_period < swa_period - 1;
  }
  bool layer_short_conv(int layer) const {
    return std::binary_search(short_conv_layers.begin(), short_conv_layers.end(), layer);
  }
  bool layer_ssm(int layer) const {
    return std::binary_search(ssm_layers.begin(), ssm_layers.end(), layer);
  }
  // The channels a Mamba-2 layer convolves (x, B and C), which it caches per position.
  int64_t ssm_conv_channels() const { return ssm_inner + 2 * ssm_groups * ssm_state; }
  // Floats of one Mamba-2 layer's recurrent state: heads x head_dim x state = inner x state.
  int64_t ssm_state_floats() const { return ssm_inner * ssm_state; }
  bool layer_uses_rope(int layer) const {
    return nope_period <= 0 || (layer + 1) % nope_period != 0;
  }
  // The cache keeps no separate values: they are the first value_dim of each key row.
  bool values_in_keys() const { return latent_attention(); }

  bool operator==(const HParams&) const = default;
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first; the last dimension is contiguous
  int32_t layer = -1;          // for per-layer tensors
  int32_t expert = -1;         // for routed-expert tensors
  absl::Span<const uint8_t> data;
  // Set for a tensor whose bytes are made only when they are needed, one tensor at a time: a
  // converter's output (a Hugging Face import or a re-quantization on its way into a .moe file),
  // which held whole would take as much memory as the model. It writes byte_size() bytes into
  // its argument; data stays empty (MaterializeTensors fills it for callers that need it). Not
  // thread-safe: producers of one spec may share state, so they run one after another.
  std::function<absl::Status(absl::Span<uint8_t>)> produce;

  bool deferred() const { return static_cast<bool>(produce); }
  int64_t num_elements() const;
  size_t byte_size() const;  // shape x dtype
};

// One routed expert of one layer.
struct ExpertId {
  int32_t layer = 0;
  int32_t expert = 0;
  bool operator==(const ExpertId&) const = default;
};

// An expert another rank holds: what running it costs, for this rank's accounting of the tokens
// that chose it (the weights it would read, its matrices' multiply-adds per token).
struct AbsentExpert {
  ExpertId id;
  int64_t bytes = 0;
  int64_t params = 0;
};

struct ModelSpec {
  Arch arch = Arch::kLlama;
  std::string name;
  HParams hp;
  TokenizerData tokenizer;
  std::vector<TensorSpec> tensors;
  // Routed experts removed from the model (moe-cli prune): their router never picks them and the
  // file has no tensors for them. Each layer keeps at least n_expert_used experts.
  std::vector<ExpertId> pruned_experts;
  // In memory only (never written): experts another rank holds under expert parallelism. No
  // tensors here, but still routed to: their outputs come from their rank.
  std::vector<AbsentExpert> absent_experts;
  // In memory only: the non-expert tensors (attention, norms, routers, shared experts, embedding
  // and head) when rank 0 alone holds them (ExpertRanks::dense_on_root_only) and this spec is
  // another rank's share: shapes and types without data, for validation and the model's
  // accounting. Such a spec runs routed experts only.
  std::vector<TensorSpec> absent_dense;
  // Keeps the bytes behind TensorSpec::data alive (mapped files, converted buffers).
  std::vector<std::shared_ptr<const void>> owners;
  // The mapped files tensors' data may lie in (.moe or GGUF: the one file; a Hugging Face
  // checkpoint: its shards). A tensor whose bytes lie inside one is stored there as it is run, at
  // file offset data.data() - base; the expert cache reads experts from there. A converted
  // tensor lies in none.
  struct SourceFile {
    std::string path;
    const uint8_t* base = nullptr;
    uint64_t size = 0;
  };
  std::vector<SourceFile> source_files;

  // By name, through an index of names built on first use (models of tens of thousands of
  // expert tensors look each one up; a scan each would take seconds). `tensors` may be edited
  // freely between calls: a lookup that finds the index stale rebuilds it. Thread-safe.
  const TensorSpec* Find(absl::string_view name) const;
  // Whether the non-expert weights are on another rank (absent_dense): only experts run here.
  bool holds_dense() const { return absent_dense.empty(); }
  // [layer][expert]: true for a pruned expert (all false when none is).
  std::vector<std::vector<bool>> PrunedMask() const;
  // [layer][expert]: true for an expert whose weights this spec does not hold (pruned or absent).
  std::vector<std::vector<bool>> WeightlessMask() const;

 private:
  // Find's cache: a copy or move starts without one (its positions are the source's).
  struct NameIndex {
    NameIndex() = default;
    NameIndex(const NameIndex&) {}
    NameIndex& operator=(const NameIndex&) { return *this; }
    absl::Mutex mu;
    absl::flat_hash_map<std::string, size_t> position ABSL_GUARDED_BY(mu);
  };
  mutable NameIndex names_;
};

// Per-pair divisors of the RoPE frequencies (Llama 3's long-context RoPE; optional), as GGUF
// names them.
inline constexpr absl::string_view kRopeFreqsTensor = "rope_freqs.weight";

// Canonical tensor names (GGUF's, with experts stored one per unit).
std::string LayerTensorName(int layer, absl::string_view base);               // blk.L.base.weight
std::string LayerBiasName(int layer, absl::string_view base);                 // blk.L.base.bias
std::string LayerBareName(int layer, absl::string_view base);  // blk.L.base (ssm_a, ssm_d)
std::string ExpertTensorName(int layer, int expert, absl::string_view base);  // blk.L.base.E.weight

// Runs a deferred tensor's producer into out (byte_size() bytes); its failure comes back with the
// tensor's name.
absl::Status MakeDeferredTensor(const TensorSpec& t, absl::Span<uint8_t> out);

// Runs every deferred tensor's producer into memory the spec keeps (owners) and clears it, for
// callers that read TensorSpec::data. A producer's failure is returned with the tensor's name.
absl::Status MaterializeTensors(ModelSpec& spec);

// Checks hyper-parameters for consistency and that every tensor the architecture needs is
// present with the right shape; errors name the offending field or tensor.
absl::Status ValidateModelSpec(const ModelSpec& spec);

// Parameter counts. "Active per token" follows the convention people quote (Mixtral's "12.9B of
// 46.7B"): everything except the routed experts a token did not select, embedding included.
// The byte figure is what one decode step must read: it counts one embedding row, not the matrix
// (unless the head is tied to it and reads it all anyway).
// The model's parameters and weight bytes, with the experts other ranks hold (absent_experts);
// held_bytes: the weights this spec itself holds.
struct ParamCounts {
  int64_t total = 0;
  int64_t active_per_token = 0;
  int64_t total_bytes = 0;
  int64_t active_bytes_per_token = 0;
  int64_t held_bytes = 0;
};
ParamCounts CountParams(const ModelSpec& spec);

// Bytes the KV cache keeps per token over all layers, its rows in `kv_type`: K and V per KV
// head, or for latent attention the one row of kv_lora_rank + rope_dim values.
size_t KvBytesPerToken(const HParams& h, DType kv_type);

}  // namespace moe
