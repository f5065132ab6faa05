#include "lib/model/model_spec.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/architecture.h"

namespace moe {

absl::string_view ArchName(Arch a) { return ArchitectureOf(a).name(); }

absl::StatusOr<Arch> ArchFromName(absl::string_view name) {
  MOE_ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(name));
  return arch->id();
}

int64_t TensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t TensorSpec::byte_size() const {
  if (shape.empty()) return 0;
  int64_t rows = num_elements() / shape.back();
  return static_cast<size_t>(rows) * RowBytes(dtype, shape.back());
}

absl::Status MakeDeferredTensor(const TensorSpec& t, absl::Span<uint8_t> out) {
  return Annotate(t.produce(out), absl::StrCat("making tensor '", t.name, "'"));
}

absl::Status MaterializeTensors(ModelSpec& spec) {
  for (TensorSpec& t : spec.tensors) {
    if (!t.deferred()) continue;
    auto bytes = std::make_shared<std::vector<uint8_t>>(t.byte_size());
    MOE_RETURN_IF_ERROR(MakeDeferredTensor(t, absl::MakeSpan(*bytes)));
    t.data = absl::MakeConstSpan(*bytes);
    t.produce = nullptr;
    spec.owners.push_back(std::move(bytes));
  }
  return absl::OkStatus();
}

const TensorSpec* ModelSpec::Find(absl::string_view name) const {
  absl::MutexLock lock(&names_.mu);
  auto indexed = [&]() -> const TensorSpec* {
    auto it = names_.position.find(name);
    if (it == names_.position.end() || it->second >= tensors.size()) return nullptr;
    const TensorSpec& t = tensors[it->second];
    return t.name == name ? &t : nullptr;
  };
  if (const TensorSpec* t = indexed()) return t;
  // Not in the index, or the index is stale: the scan decides, and a hit it missed rebuilds it.
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name != name) continue;
    names_.position.clear();
    names_.position.reserve(tensors.size());
    for (size_t j = 0; j < tensors.size(); ++j) names_.position.try_emplace(tensors[j].name, j);
    return &tensors[i];
  }
  return nullptr;
}

std::string LayerBiasName(int layer, absl::string_view base) {
  return absl::StrCat("blk.", layer, ".", base, ".bias");
}

std::string LayerBareName(int layer, absl::string_view base) {
  return absl::StrCat("blk.", layer, ".", base);
}

std::string LayerTensorName(int layer, absl::string_view base) {
  return absl::StrCat("blk.", layer, ".", base, ".weight");
}

std::string ExpertTensorName(int layer, int expert, absl::string_view base) {
  return absl::StrCat("blk.", layer, ".", base, ".", expert, ".weight");
}

namespace {

std::string ShapeString(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// Requires tensor `name` with exactly `shape`; quantized types need whole blocks per row.
absl::Status Expect(const ModelSpec& spec, const std::string& name, std::vector<int64_t> shape) {
  const TensorSpec* t = spec.Find(name);
  if (t == nullptr) {
    // Held by rank 0 (ModelSpec::absent_dense): its shape still has to be the model's.
    for (const TensorSpec& a : spec.absent_dense) {
      if (a.name != name) continue;
      if (a.shape == shape) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                     ShapeString(a.shape), ", expected ",
                                                     ShapeString(shape)));
    }
    return absl::NotFoundError(absl::StrCat("missing tensor '", name, "'"));
  }
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                   ShapeString(t->shape), ", expected ",
                                                   ShapeString(shape)));
  }
  if (!RowSizeValid(t->dtype, shape.back())) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' rows of ", shape.back(),
                                                   " elements do not fit ", DTypeName(t->dtype),
                                                   " blocks"));
  }
  if (!t->deferred() && t->data.size() < t->byte_size()) {
    return absl::DataLossError(
        absl::StrCat("tensor '", name, "' has ", t->data.size(), " bytes, needs ", t->byte_size()));
  }
  return absl::OkStatus();
}

absl::Status ExpectGroupedQueryAttention(const ModelSpec& spec, int l) {
  const HParams& h = spec.hp;
  if (h.value_dim != 0 && h.value_dim != h.head_dim) {  // 0: not stated, the same
    return absl::UnimplementedError(absl::StrCat("attention.value_length ", h.value_dim,
                                                 " different from key_length ", h.head_dim));
  }
  auto name = [&](absl::string_view b) { return LayerTensorName(l, b); };
  auto bias = [&](absl::string_view b) { return LayerBiasName(l, b); };
  const int64_t q_dim = h.n_head * h.head_dim, kv_dim = h.n_head_kv * h.head_dim;
  // With an output gate, each head's q rows are followed by its gate's.
  const int64_t q_rows = h.attention_output_gate ? 2 * q_dim : q_dim;
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_q"), {q_rows, h.n_embd}));
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_k"), {kv_dim, h.n_embd}));
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_v"), {kv_dim, h.n_embd}));
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_output"), {h.n_embd, q_dim}));
  if (h.has_attn_out_bias) MOE_RETURN_IF_ERROR(Expect(spec, bias("attn_output"), {h.n_embd}));
  if (h.has_attn_sinks) MOE_RETURN_IF_ERROR(Expect(spec, name("attn_sinks"), {h.n_head}));
  if (h.has_qkv_bias) {
    MOE_RETURN_IF_ERROR(Expect(spec, bias("attn_q"), {q_dim}));
    MOE_RETURN_IF_ERROR(Expect(spec, bias("attn_k"), {kv_dim}));
    MOE_RETURN_IF_ERROR(Expect(spec, bias("attn_v"), {kv_dim}));
  }
  if (h.qk_norm == QkNorm::kFull) {
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_q_norm"), {q_dim}));
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_k_norm"), {kv_dim}));
  } else if (h.qk_norm == QkNorm::kPerHead || h.qk_norm == QkNorm::kPerHeadAfterRope) {
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_q_norm"), {h.head_dim}));
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_k_norm"), {h.head_dim}));
  }
  return absl::OkStatus();
}

// The absorbed layout: attn_k_b / attn_v_b per head (older files' attn_kv_b is split at import).
absl::Status ExpectLatentAttention(const ModelSpec& spec, int l) {
  const HParams& h = spec.hp;
  auto name = [&](absl::string_view b) { return LayerTensorName(l, b); };
  const int64_t r = h.kv_lora_rank, d_q = h.qk_nope_dim + h.rope_dim;
  if (h.q_lora_rank > 0) {
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_q_a"), {h.q_lora_rank, h.n_embd}));
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_q_a_norm"), {h.q_lora_rank}));
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_q_b"), {h.n_head * d_q, h.q_lora_rank}));
  } else {
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_q"), {h.n_head * d_q, h.n_embd}));
  }
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_kv_a_mqa"), {r + h.rope_dim, h.n_embd}));
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_kv_a_norm"), {r}));
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_k_b"), {h.n_head, r, h.qk_nope_dim}));
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_v_b"), {h.n_head, h.v_head_dim, r}));
  MOE_RETURN_IF_ERROR(Expect(spec, name("attn_output"), {h.n_embd, h.n_head * h.v_head_dim}));
  return absl::OkStatus();
}

absl::Status Positive(absl::string_view what, int64_t v) {
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(what, " must be positive, got ", v));
  return absl::OkStatus();
}

}  // namespace

namespace {

// Pruned experts name a MoE layer's experts, each once, and leave every layer its top-k.
absl::Status ValidatePrunedExperts(const ModelSpec& spec, const Architecture& arch) {
  const HParams& h = spec.hp;
  std::vector<std::vector<bool>> seen(h.n_layer, std::vector<bool>(h.n_expert, false));
  std::vector<int64_t> left(h.n_layer, h.n_expert);
  for (const ExpertId& id : spec.pruned_experts) {
    if (id.layer < 0 || id.layer >= h.n_layer ||
        arch.Layer(h, id.layer).ffn != FeedForwardPart::kMixture) {
      return absl::InvalidArgumentError(
          absl::StrCat("pruned expert of layer ", id.layer, ": not a layer with routed experts"));
    }
    if (id.expert < 0 || id.expert >= h.n_expert) {
      return absl::InvalidArgumentError(absl::StrCat("pruned expert ", id.expert, " of layer ",
                                                     id.layer, " is outside [0, ", h.n_expert,
                                                     ")"));
    }
    if (seen[id.layer][id.expert]) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert ", id.expert, " of layer ", id.layer, " is pruned twice"));
    }
    seen[id.layer][id.expert] = true;
    if (--left[id.layer] < h.n_expert_used) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", id.layer, " keeps ", left[id.layer],
                                                     " experts after pruning, "
                                                     "fewer than the ",
                                                     h.n_expert_used, " each token uses"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::vector<bool>> ModelSpec::PrunedMask() const {
  std::vector<std::vector<bool>> mask(std::max<int64_t>(hp.n_layer, 0),
                                      std::vector<bool>(std::max<int64_t>(hp.n_expert, 0)));
  for (const ExpertId& id : pruned_experts) {
    if (id.layer >= 0 && id.layer < hp.n_layer && id.expert >= 0 && id.expert < hp.n_expert) {
      mask[id.layer][id.expert] = true;
    }
  }
  return mask;
}

std::vector<std::vector<bool>> ModelSpec::WeightlessMask() const {
  std::vector<std::vector<bool>> mask = PrunedMask();
  for (const auto& [id, bytes, params] : absent_experts) {
    if (id.layer >= 0 && id.layer < hp.n_layer && id.expert >= 0 && id.expert < hp.n_expert) {
      mask[id.layer][id.expert] = true;
    }
  }
  return mask;
}

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  const HParams& h = spec.hp;
  MOE_RETURN_IF_ERROR(Positive("n_vocab", h.n_vocab));
  MOE_RETURN_IF_ERROR(Positive("n_embd", h.n_embd));
  MOE_RETURN_IF_ERROR(Positive("n_layer", h.n_layer));
  MOE_RETURN_IF_ERROR(Positive("n_head", h.n_head));
  MOE_RETURN_IF_ERROR(Positive("n_head_kv", h.n_head_kv));
  MOE_RETURN_IF_ERROR(Positive("head_dim", h.head_dim));
  MOE_RETURN_IF_ERROR(Positive("n_expert", h.n_expert));
  MOE_RETURN_IF_ERROR(Positive("n_expert_used", h.n_expert_used));
  MOE_RETURN_IF_ERROR(Positive("n_ff_expert", h.n_ff_expert));
  // Every count and size has a bound, checked before anything below adds or multiplies them
  // into expected shapes: with sizes up to 2^24 and at most 4096 heads, no product passes 2^38,
  // far inside int64 (a file's word is not enough for that).
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  struct Bound {
    const char* what;
    int64_t value, max;
  };
  const Bound bounds[] = {{"n_vocab", h.n_vocab, kMaxSize},
                          {"n_embd", h.n_embd, kMaxSize},
                          {"head_dim", h.head_dim, kMaxSize},
                          {"value_length", h.value_dim, kMaxSize},
                          {"rope_dim", h.rope_dim, kMaxSize},
                          {"n_ff_expert", h.n_ff_expert, kMaxSize},
                          {"n_ff_shared", h.n_ff_shared, kMaxSize},
                          {"n_ff_dense", h.n_ff_dense, kMaxSize},
                          {"q_lora_rank", h.q_lora_rank, kMaxSize},
                          {"kv_lora_rank", h.kv_lora_rank, kMaxSize},
                          {"qk_nope_dim", h.qk_nope_dim, kMaxSize},
                          {"v_head_dim", h.v_head_dim, kMaxSize},
                          {"n_head_kv", h.n_head_kv, kMaxSize},
                          {"n_head", h.n_head, 4096},
                          {"n_layer", h.n_layer, 4096},
                          {"n_expert", h.n_expert, 65536},
                          {"rope_sections[0]", h.rope_sections[0], kMaxSize},
                          {"rope_sections[1]", h.rope_sections[1], kMaxSize},
                          {"rope_sections[2]", h.rope_sections[2], kMaxSize},
                          {"rope_sections[3]", h.rope_sections[3], kMaxSize}};
  for (const Bound& b : bounds) {
    if (b.value > b.max) {
      return absl::InvalidArgumentError(
          absl::StrCat(b.what, " ", b.value, " is out of range (at most ", b.max, ")"));
    }
  }
  for (int64_t section : h.rope_sections) {
    if (section < 0) {
      return absl::InvalidArgumentError(absl::StrCat("rope_sections hold ", section));
    }
  }
  if (!(h.rms_eps > 0) || !std::isfinite(h.rms_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_eps must be a positive number, got ", h.rms_eps));
  }
  if (!(h.rope_freq_base > 0) || !std::isfinite(h.rope_freq_base)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope freq_base must be a positive number, got ", h.rope_freq_base));
  }
  if (h.n_head % h.n_head_kv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_head ", h.n_head, " is not a multiple of n_head_kv ", h.n_head_kv));
  }
  if (h.n_expert_used > h.n_expert) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert_used_count ", h.n_expert_used, " exceeds expert_count ", h.n_expert));
  }
  if (h.latent_attention()) {
    if (h.n_head_kv != 1 || h.head_dim != h.kv_lora_rank + h.rope_dim ||
        h.value_dim != h.kv_lora_rank || h.qk_nope_dim <= 0 || h.v_head_dim <= 0 ||
        h.q_lora_rank < 0 || h.kv_lora_rank > 65536 || h.v_head_dim > 65536) {
      return absl::InvalidArgumentError(absl::StrCat(
          "latent attention sizes do not fit together: kv_lora_rank ", h.kv_lora_rank, ", rope ",
          h.rope_dim, ", key_length ", h.head_dim, ", value_length ", h.value_dim,
          ", head_count_kv ", h.n_head_kv, ", nope ", h.qk_nope_dim, ", v_head ", h.v_head_dim));
    }
  }
  if (!(h.yarn_factor >= 1) || !std::isfinite(h.yarn_factor) ||
      (h.yarn_factor > 1 && h.yarn_orig_ctx <= 0) || !std::isfinite(h.rope_attn_factor) ||
      !std::isfinite(h.yarn_log_mul) || !std::isfinite(h.yarn_beta_fast) ||
      !std::isfinite(h.yarn_beta_slow)) {
    return absl::InvalidArgumentError(absl::StrCat("RoPE scaling out of range: factor ",
                                                   h.yarn_factor, ", original context ",
                                                   h.yarn_orig_ctx));
  }
  if (h.sliding_window < 0 || h.swa_period < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding window ", h.sliding_window, ", period ", h.swa_period));
  }
  if (h.window_chunked && h.sliding_window <= 0) {
    return absl::InvalidArgumentError("chunked attention without a chunk size (sliding_window)");
  }
  if (h.nope_period < 0 || !std::isfinite(h.attn_temp_scale) ||
      !std::isfinite(h.attn_temp_offset) || h.attn_temp_offset < 0 ||
      (h.attn_temp_scale != 0.f && h.attn_temp_floor <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NoPE layers every ", h.nope_period, ", query temperature scale ", h.attn_temp_scale,
        " floor ", h.attn_temp_floor, " offset ", h.attn_temp_offset));
  }
  if (!h.short_conv_layers.empty()) {
    if (h.short_conv_kernel < 2 || h.short_conv_kernel > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("short convolution kernel of ", h.short_conv_kernel, " (from 2 to 64)"));
    }
    for (size_t i = 0; i < h.short_conv_layers.size(); ++i) {
      const int64_t l = h.short_conv_layers[i];
      if (l < 0 || l >= h.n_layer || (i > 0 && l <= h.short_conv_layers[i - 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat("short-convolution layers must ascend within the ", h.n_layer,
                         " layers (got ", l, ")"));
      }
    }
  }
  if (!h.ssm_layers.empty()) {
    if (h.ssm_conv_kernel < 2 || h.ssm_conv_kernel > 64 || h.ssm_inner <= 0 || h.ssm_state <= 0 ||
        h.ssm_heads <= 0 || h.ssm_groups <= 0 || h.ssm_inner % h.ssm_heads != 0 ||
        h.ssm_heads % h.ssm_groups != 0 || h.ssm_inner % h.ssm_groups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Mamba-2 layers of convolution kernel ", h.ssm_conv_kernel,
                       " (from 2 to 64), inner size ", h.ssm_inner, ", state size ", h.ssm_state,
                       ", ", h.ssm_heads, " heads and ", h.ssm_groups,
                       " groups (heads and groups must divide the inner size, groups the heads)"));
    }
    for (size_t i = 0; i < h.ssm_layers.size(); ++i) {
      const int64_t l = h.ssm_layers[i];
      if (l < 0 || l >= h.n_layer || (i > 0 && l <= h.ssm_layers[i - 1]) ||
          h.layer_short_conv(static_cast<int>(l))) {
        return absl::InvalidArgumentError(
            absl::StrCat("Mamba-2 layers must ascend within the ", h.n_layer,
                         " layers and be no short-convolution layers (got ", l, ")"));
      }
    }
  }
  for (const std::vector<int64_t>* list : {&h.mixer_only_layers, &h.ffn_only_layers}) {
    for (size_t i = 0; i < list->size(); ++i) {
      const int64_t l = (*list)[i];
      const bool other = list == &h.ffn_only_layers ? h.layer_mixer_only(static_cast<int>(l))
                                                    : h.layer_ffn_only(static_cast<int>(l));
      if (l < 0 || l >= h.n_layer || (i > 0 && l <= (*list)[i - 1]) || other) {
        return absl::InvalidArgumentError(
            absl::StrCat("layers of one part must ascend within the ", h.n_layer,
                         " layers, each a mixer alone or a feed-forward part alone (got ", l, ")"));
      }
    }
  }
  for (int64_t l : h.ffn_only_layers) {
    if (h.layer_ssm(static_cast<int>(l)) || h.layer_short_conv(static_cast<int>(l))) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l, " is a feed-forward part alone and a convolution layer"));
    }
  }
  if (h.moe_latent_dim < 0 || (h.moe_latent_dim > 0 && !h.relu_squared_ffn)) {
    return absl::UnimplementedError(
        absl::StrCat("latent experts of size ", h.moe_latent_dim, " outside nemotron_h_moe"));
  }
  if (h.relu_squared_ffn && (h.swiglu_clamped || h.has_expert_bias || h.n_ff_dense > 0 ||
                             h.shared_expert_gate || h.expert_input_weighted)) {
    return absl::UnimplementedError(
        "ungated relu^2 experts with a clamped SwiGLU, expert biases, dense layers, a shared "
        "expert gate or weighted expert inputs");
  }
  if ((h.qk_norm == QkNorm::kPerHeadUnweighted || h.qk_norm == QkNorm::kPerHeadAfterRope) &&
      h.latent_attention()) {
    return absl::InvalidArgumentError("an unweighted per-head QK-norm with latent attention");
  }
  if (h.rope_dim % 2 != 0 || h.rope_dim <= 0 || h.rope_dim > h.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoPE over ", h.rope_dim, " of head_dim ", h.head_dim, " dimensions"));
  }
  if (h.n_layer_dense < 0 || h.n_layer_dense > h.n_layer ||
      (h.n_layer_dense > 0 && h.n_ff_dense <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(h.n_layer_dense, " leading dense layers of ",
                                                   h.n_layer, ", width ", h.n_ff_dense));
  }
  for (const auto& [what, v] : {std::pair<const char*, float>{"embedding_scale", h.embedding_scale},
                                {"residual_scale", h.residual_scale},
                                {"logit_scale", h.logit_scale}}) {
    if (!(v > 0) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " must be a positive number, got ", v));
    }
  }
  if (h.moe_layer_step < 1 || h.moe_layer_step > std::max<int64_t>(h.n_layer, 1) ||
      (h.moe_layer_step > 1 && h.n_ff_dense <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("experts every ", h.moe_layer_step,
                                                   " layers of ", h.n_layer,
                                                   ", the others' dense width ", h.n_ff_dense));
  }
  if (h.n_expert_groups <= 0 || h.n_expert % h.n_expert_groups != 0 || h.n_group_used <= 0 ||
      h.n_group_used > h.n_expert_groups ||
      h.n_expert_used > h.n_expert / h.n_expert_groups * h.n_group_used) {
    return absl::InvalidArgumentError(
        absl::StrCat(h.n_expert, " experts in ", h.n_expert_groups, " groups, ", h.n_group_used,
                     " groups used, cannot give ", h.n_expert_used, " experts per token"));
  }
  if (!(h.routed_scale > 0) || !std::isfinite(h.routed_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert_weights_scale must be a positive number, got ", h.routed_scale));
  }
  if (!spec.tokenizer.tokens.empty() &&
      static_cast<int64_t>(spec.tokenizer.tokens.size()) != h.n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", spec.tokenizer.tokens.size(),
                                                   " tokens but the model's vocabulary is ",
                                                   h.n_vocab));
  }
  for (const TensorSpec& t : spec.tensors) {
    // A row-group layout holds whole groups of 16 rows of a matrix.
    if (RowGroup(t.dtype) > 1 && (t.shape.size() != 2 || t.shape[0] % kGroupRows != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is stored as ",
                                                     DTypeName(t.dtype), ", whole groups of ",
                                                     kGroupRows, " rows, but its shape is not"));
    }
  }
  MOE_RETURN_IF_ERROR(Expect(spec, "token_embd.weight", {h.n_vocab, h.n_embd}));
  const Architecture& arch = ArchitectureOf(spec.arch);
  MOE_RETURN_IF_ERROR(Expect(spec, std::string(arch.output_norm()), {h.n_embd}));
  if (!h.tied_output) MOE_RETURN_IF_ERROR(Expect(spec, "output.weight", {h.n_vocab, h.n_embd}));
  if (spec.Find(kRopeFreqsTensor) != nullptr) {
    MOE_RETURN_IF_ERROR(Expect(spec, std::string(kRopeFreqsTensor), {h.rope_dim / 2}));
  }
  MOE_RETURN_IF_ERROR(ValidatePrunedExperts(spec, arch));
  const auto weightless = spec.WeightlessMask();
  for (int l = 0; l < h.n_layer; ++l) {
    auto name = [&](absl::string_view b) { return LayerTensorName(l, b); };
    auto bias = [&](absl::string_view b) { return LayerBiasName(l, b); };
    const LayerParts parts = arch.Layer(h, l);
    MOE_RETURN_IF_ERROR(Expect(spec, name("attn_norm"), {h.n_embd}));
    if (parts.attention == AttentionPart::kNone) {
      // a feed-forward part alone
    } else if (parts.attention == AttentionPart::kShortConv) {
      MOE_RETURN_IF_ERROR(Expect(spec, name("shortconv.in_proj"), {3 * h.n_embd, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("shortconv.out_proj"), {h.n_embd, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("shortconv.conv"), {h.n_embd, h.short_conv_kernel}));
    } else if (parts.attention == AttentionPart::kMamba2) {
      const int64_t in_proj = 2 * h.ssm_inner + 2 * h.ssm_groups * h.ssm_state + h.ssm_heads;
      MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_in"), {in_proj, h.n_embd}));
      MOE_RETURN_IF_ERROR(
          Expect(spec, name("ssm_conv1d"), {h.ssm_conv_channels(), h.ssm_conv_kernel}));
      MOE_RETURN_IF_ERROR(Expect(spec, bias("ssm_conv1d"), {h.ssm_conv_channels()}));
      MOE_RETURN_IF_ERROR(Expect(spec, bias("ssm_dt"), {h.ssm_heads}));
      MOE_RETURN_IF_ERROR(Expect(spec, LayerBareName(l, "ssm_a"), {h.ssm_heads, 1}));
      MOE_RETURN_IF_ERROR(Expect(spec, LayerBareName(l, "ssm_d"), {h.ssm_heads, 1}));
      MOE_RETURN_IF_ERROR(
          Expect(spec, name("ssm_norm"), {h.ssm_groups, h.ssm_inner / h.ssm_groups}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_out"), {h.n_embd, h.ssm_inner}));
    } else if (parts.attention == AttentionPart::kGatedDeltaNet) {
      const int64_t channels = h.ssm_conv_channels(), heads = h.ssm_heads;
      if (spec.Find(name("ssm_in")) != nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            "tensor '", name("ssm_in"),
            "': this file is from a llama.cpp converter that fused a gated delta net's q, k, v and "
            "z into one ssm_in; convert the checkpoint again with a current llama.cpp (attn_qkv "
            "and attn_gate)"));
      }
      MOE_RETURN_IF_ERROR(Expect(spec, name("attn_qkv"), {channels, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("attn_gate"), {h.ssm_inner, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_conv1d"), {channels, h.ssm_conv_kernel}));
      MOE_RETURN_IF_ERROR(Expect(spec, bias("ssm_dt"), {heads}));
      MOE_RETURN_IF_ERROR(Expect(spec, LayerBareName(l, "ssm_a"), {heads}));
      if (h.ssm_grouped_heads) {
        MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_ba"), {2 * heads, h.n_embd}));
      } else {
        MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_beta"), {heads, h.n_embd}));
        MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_alpha"), {heads, h.n_embd}));
      }
      MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_norm"), {h.ssm_state}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("ssm_out"), {h.n_embd, h.ssm_inner}));
    } else if (parts.attention == AttentionPart::kLatent) {
      MOE_RETURN_IF_ERROR(ExpectLatentAttention(spec, l));
    } else {
      MOE_RETURN_IF_ERROR(ExpectGroupedQueryAttention(spec, l));
    }
    if (parts.ffn == FeedForwardPart::kNone) continue;
    MOE_RETURN_IF_ERROR(Expect(spec, name(parts.ffn_norm), {h.n_embd}));
    if (parts.ffn == FeedForwardPart::kDense) {
      MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_gate"), {h.n_ff_dense, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_up"), {h.n_ff_dense, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_down"), {h.n_embd, h.n_ff_dense}));
      continue;
    }
    MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_gate_inp"), {h.n_expert, h.n_embd}));
    if (h.has_selection_bias) {
      MOE_RETURN_IF_ERROR(Expect(spec, bias("exp_probs_b"), {h.n_expert}));
    }
    if (h.has_router_bias) {
      MOE_RETURN_IF_ERROR(Expect(spec, bias("ffn_gate_inp"), {h.n_expert}));
    }
    if (h.has_expert_bias) {
      MOE_RETURN_IF_ERROR(Expect(spec, bias("ffn_gate_exps"), {h.n_expert, h.n_ff_expert}));
      MOE_RETURN_IF_ERROR(Expect(spec, bias("ffn_up_exps"), {h.n_expert, h.n_ff_expert}));
      MOE_RETURN_IF_ERROR(Expect(spec, bias("ffn_down_exps"), {h.n_expert, h.n_embd}));
    }
    const int64_t xd = h.expert_dim();
    if (h.moe_latent_dim > 0) {
      MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_latent_down"), {xd, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_latent_up"), {h.n_embd, xd}));
    }
    for (int e = 0; e < h.n_expert; ++e) {
      if (weightless[l][e]) continue;  // pruned or held by another rank: no tensors needed
      if (!h.relu_squared_ffn) {
        MOE_RETURN_IF_ERROR(Expect(spec, ExpertTensorName(l, e, "ffn_gate"), {h.n_ff_expert, xd}));
      }
      MOE_RETURN_IF_ERROR(Expect(spec, ExpertTensorName(l, e, "ffn_up"), {h.n_ff_expert, xd}));
      MOE_RETURN_IF_ERROR(Expect(spec, ExpertTensorName(l, e, "ffn_down"), {xd, h.n_ff_expert}));
    }
    if (h.n_ff_shared > 0) {
      if (!h.relu_squared_ffn) {
        MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_gate_shexp"), {h.n_ff_shared, h.n_embd}));
      }
      MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_up_shexp"), {h.n_ff_shared, h.n_embd}));
      MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_down_shexp"), {h.n_embd, h.n_ff_shared}));
      if (h.shared_expert_gate) {
        MOE_RETURN_IF_ERROR(Expect(spec, name("ffn_gate_inp_shexp"), {h.n_embd}));
      }
    }
  }
  return absl::OkStatus();
}

ParamCounts CountParams(const ModelSpec& spec) {
  ParamCounts c;
  const HParams& h = spec.hp;
  const auto pruned = spec.PrunedMask();
  // A token reads top-k of the experts its layer has: count the expected share exactly.
  auto kept = [&](int layer) -> int64_t {
    if (layer < 0 || layer >= h.n_layer) return h.n_expert;
    return h.n_expert - std::count(pruned[layer].begin(), pruned[layer].end(), true);
  };
  for (const AbsentExpert& a : spec.absent_experts) {  // held by another rank: still the model's
    c.total += a.params;
    c.total_bytes += a.bytes;
    c.active_per_token += a.params * h.n_expert_used / kept(a.id.layer);
    c.active_bytes_per_token += a.bytes * h.n_expert_used / kept(a.id.layer);
  }
  auto count = [&](const TensorSpec& t, bool held) {
    int64_t n = t.num_elements();
    int64_t bytes = static_cast<int64_t>(t.byte_size());
    if (t.expert >= 0 && t.layer >= 0 && t.layer < h.n_layer && t.expert < h.n_expert &&
        pruned[t.layer][t.expert]) {
      return;  // a pruned expert's tensors left in the file are never read
    }
    c.total += n;
    c.total_bytes += bytes;
    if (held) c.held_bytes += bytes;
    if (t.expert >= 0) {
      c.active_per_token += n * h.n_expert_used / kept(t.layer);
      c.active_bytes_per_token += bytes * h.n_expert_used / kept(t.layer);
    } else if (t.name == "token_embd.weight") {
      c.active_per_token += n;
      c.active_bytes_per_token += h.tied_output ? bytes : bytes / std::max<int64_t>(1, h.n_vocab);
    } else {
      c.active_per_token += n;
      c.active_bytes_per_token += bytes;
    }
  };
  for (const TensorSpec& t : spec.tensors) count(t, true);
  for (const TensorSpec& t : spec.absent_dense) count(t, false);  // rank 0's
  return c;
}

size_t KvBytesPerToken(const HParams& h, DType kv_type) {
  const size_t planes = h.values_in_keys() ? 1 : 2;
  // A short-convolution or Mamba-2 layer keeps a few positions (and a state) whatever the
  // length: nothing per token.
  const size_t attending = static_cast<size_t>(h.n_layer) - h.short_conv_layers.size() -
                           h.ssm_layers.size() - h.ffn_only_layers.size();
  return planes * attending * RowBytes(kv_type, h.n_head_kv * h.head_dim);
}

}  // namespace moe
