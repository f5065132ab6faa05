#include "lib/model/model.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/status_macros.h"
#include "lib/kv/kv_type.h"
#include "lib/model/parts/rope_params.h"

namespace moe {

absl::StatusOr<std::shared_ptr<const Model>> Model::Create(ModelSpec spec) {
  MOE_RETURN_IF_ERROR(MaterializeTensors(spec));  // a converter's deferred tensors, if any
  MOE_RETURN_IF_ERROR(ValidateModelSpec(spec));
  std::shared_ptr<Model> m(new Model());
  m->spec_ = std::move(spec);
  m->used_.assign(m->spec_.tensors.size(), false);
  MOE_RETURN_IF_ERROR(m->Resolve());
  MOE_RETURN_IF_ERROR(m->CheckEveryTensorUsed());
  m->used_ = {};
  return std::shared_ptr<const Model>(std::move(m));
}

const TensorSpec* Model::Use(const std::string& name) {
  const TensorSpec* t = spec_.Find(name);
  if (t != nullptr) used_[t - spec_.tensors.data()] = true;
  return t;
}

absl::Status Model::CheckEveryTensorUsed() const {
  for (size_t i = 0; i < spec_.tensors.size(); ++i) {
    if (used_[i]) continue;
    return absl::UnimplementedError(absl::StrCat(
        "tensor '", spec_.tensors[i].name, "' is not used by libmoe's ", ArchName(spec_.arch),
        " architecture: the file is a variant libmoe does not run (ignoring the tensor could "
        "give wrong results)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const float*> Model::Vector(const std::string& name) {
  const TensorSpec* t = Use(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor '", name, "'"));
  // Norm weights and biases are small: keep an aligned F32 copy whatever the stored type.
  std::vector<float>& v = f32_vectors_.emplace_back(t->num_elements());
  DequantizeRow(t->dtype, t->data.data(), v.data(), t->num_elements());
  return v.data();
}

absl::StatusOr<WeightView> Model::Matrix(const std::string& name) {
  const TensorSpec* t = Use(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor '", name, "'"));
  WeightView w;
  w.dtype = t->dtype;
  w.cols = t->shape.back();
  w.rows = t->num_elements() / w.cols;
  w.data = t->data.data();
  return w;
}

absl::Status Model::ResolveGroupedQueryAttention(int l, LayerWeights& L) {
  const HParams& h = spec_.hp;
  auto name = [&](absl::string_view b) { return LayerTensorName(l, b); };
  auto bias = [&](absl::string_view b) { return LayerBiasName(l, b); };
  MOE_ASSIGN_OR_RETURN(L.wq, Matrix(name("attn_q")));
  MOE_ASSIGN_OR_RETURN(L.wk, Matrix(name("attn_k")));
  MOE_ASSIGN_OR_RETURN(L.wv, Matrix(name("attn_v")));
  if (h.has_qkv_bias) {
    MOE_ASSIGN_OR_RETURN(L.bq, Vector(bias("attn_q")));
    MOE_ASSIGN_OR_RETURN(L.bk, Vector(bias("attn_k")));
    MOE_ASSIGN_OR_RETURN(L.bv, Vector(bias("attn_v")));
  }
  if (h.qk_norm == QkNorm::kFull || h.qk_norm == QkNorm::kPerHead ||
      h.qk_norm == QkNorm::kPerHeadAfterRope) {
    MOE_ASSIGN_OR_RETURN(L.q_norm, Vector(name("attn_q_norm")));
    MOE_ASSIGN_OR_RETURN(L.k_norm, Vector(name("attn_k_norm")));
  }
  if (h.has_attn_out_bias) {
    MOE_ASSIGN_OR_RETURN(L.bo, Vector(bias("attn_output")));
  }
  if (h.has_attn_sinks) {
    MOE_ASSIGN_OR_RETURN(L.sinks, Vector(name("attn_sinks")));
  }
  L.dense_bytes = L.wq.byte_size() + L.wk.byte_size() + L.wv.byte_size() + L.wo.byte_size();
  return absl::OkStatus();
}

absl::Status Model::ResolveRopeDivisors() {
  const HParams& h = spec_.hp;
  const int64_t pairs = h.rope_dim / 2;
  const TensorSpec* file_factors = Use(std::string(kRopeFreqsTensor));
  if (file_factors == nullptr && !h.multimodal_rope()) return absl::OkStatus();
  std::vector<float> divisors(pairs, 1.f);
  if (file_factors != nullptr) {  // rope_dim / 2 values (ValidateModelSpec)
    DequantizeRow(file_factors->dtype, file_factors->data.data(), divisors.data(), pairs);
    for (int64_t i = 0; i < pairs; ++i) {
      if (!(divisors[i] > 0.f) || !std::isfinite(divisors[i])) {
        return absl::InvalidArgumentError(absl::StrCat(kRopeFreqsTensor, " value ", i, " is ",
                                                       divisors[i], ", not a positive divisor"));
      }
    }
  }
  // A pair that keeps angle 0 for text: an infinite divisor makes its frequency 0.
  if (h.multimodal_rope()) {
    for (int64_t i = 0; i < pairs; ++i) {
      if (!MultimodalPairTurnsForText(h.rope_sections, i)) {
        divisors[i] = std::numeric_limits<float>::infinity();
      }
    }
  }
  // Among the model's vectors, which a device backend uploads.
  rope_freq_factors_ = f32_vectors_.emplace_back(std::move(divisors)).data();
  return absl::OkStatus();
}

absl::Status Model::ResolveExperts(int l, LayerWeights& L) {
  const HParams& h = spec_.hp;
  auto bias = [&](absl::string_view b) { return LayerBiasName(l, b); };
  // Expert biases are stacked per layer ([n_expert x rows]); each expert points at its row.
  const float *gate_b = nullptr, *up_b = nullptr, *down_b = nullptr;
  if (h.has_expert_bias) {
    MOE_ASSIGN_OR_RETURN(gate_b, Vector(bias("ffn_gate_exps")));
    MOE_ASSIGN_OR_RETURN(up_b, Vector(bias("ffn_up_exps")));
    MOE_ASSIGN_OR_RETURN(down_b, Vector(bias("ffn_down_exps")));
  }
  L.experts.resize(h.n_expert);
  for (const AbsentExpert& a : spec_.absent_experts) {
    if (a.id.layer != l || a.id.expert < 0 || a.id.expert >= h.n_expert) continue;
    L.experts[a.id.expert].remote_bytes = a.bytes;
    L.experts[a.id.expert].remote_params = a.params;
  }
  for (int e = 0; e < h.n_expert; ++e) {
    if (weightless_[l][e]) continue;  // pruned, or held by another rank: no weights here
    ExpertWeights& x = L.experts[e];
    if (!h.relu_squared_ffn) {  // an ungated expert keeps an empty gate
      MOE_ASSIGN_OR_RETURN(x.gate, Matrix(ExpertTensorName(l, e, "ffn_gate")));
    }
    MOE_ASSIGN_OR_RETURN(x.up, Matrix(ExpertTensorName(l, e, "ffn_up")));
    MOE_ASSIGN_OR_RETURN(x.down, Matrix(ExpertTensorName(l, e, "ffn_down")));
    if (h.has_expert_bias) {
      x.gate_bias = gate_b + e * h.n_ff_expert;
      x.up_bias = up_b + e * h.n_ff_expert;
      x.down_bias = down_b + e * h.n_embd;
    }
  }
  return absl::OkStatus();
}

absl::Status Model::Resolve() {
  const HParams& h = spec_.hp;
  pruned_ = spec_.PrunedMask();
  weightless_ = spec_.WeightlessMask();
  const Architecture& arch = ArchitectureOf(spec_.arch);
  // What the convolution layers carry instead of K and V rows: their input's last kernel - 1
  // rows and, for a recurrent layer, a state (the lists empty when no layer has them).
  for (int l = 0; l < h.n_layer; ++l) {
    const bool short_conv = h.layer_short_conv(l), ssm = h.layer_ssm(l);
    const bool ffn_only = h.layer_ffn_only(l);  // a feed-forward part alone caches nothing
    if (!short_conv && !ssm && !ffn_only) continue;
    conv_widths_.resize(h.n_layer, 0);
    conv_rows_.resize(h.n_layer, 0);
    conv_widths_[l] = ffn_only ? kNoKvRows : short_conv ? h.n_embd : h.ssm_conv_channels();
    if (ffn_only) continue;
    conv_rows_[l] =
        std::max<int64_t>(0, (short_conv ? h.short_conv_kernel : h.ssm_conv_kernel) - 1);
    if (!ssm) continue;
    state_floats_.resize(h.n_layer, 0);
    state_floats_[l] = h.ssm_state_floats();
  }
  if (!spec_.holds_dense()) {
    // Another rank's share under expert parallelism with the rest on rank 0: experts only.
    layers_.resize(h.n_layer);
    for (int l = 0; l < h.n_layer; ++l) {
      LayerWeights& L = layers_[l];
      L.parts = arch.Layer(h, l);
      attention_windows_.push_back(L.parts.window);
      if (L.parts.ffn == FeedForwardPart::kMixture) MOE_RETURN_IF_ERROR(ResolveExperts(l, L));
    }
    return absl::OkStatus();
  }
  // (Moving the inner vectors on growth keeps their buffers, so the pointers handed out stay
  // valid.)
  MOE_ASSIGN_OR_RETURN(token_embd_, Matrix("token_embd.weight"));
  MOE_ASSIGN_OR_RETURN(output_norm_, Vector(std::string(arch.output_norm())));
  if (h.tied_output) {
    output_ = token_embd_;
  } else {
    MOE_ASSIGN_OR_RETURN(output_, Matrix("output.weight"));
  }
  MOE_RETURN_IF_ERROR(ResolveRopeDivisors());
  layers_.resize(h.n_layer);
  for (int l = 0; l < h.n_layer; ++l) {
    LayerWeights& L = layers_[l];
    L.parts = arch.Layer(h, l);
    attention_windows_.push_back(L.parts.window);
    auto name = [&](absl::string_view b) { return LayerTensorName(l, b); };
    auto bias = [&](absl::string_view b) { return LayerBiasName(l, b); };
    MOE_ASSIGN_OR_RETURN(L.attn_norm, Vector(name("attn_norm")));
    if (L.parts.attention == AttentionPart::kShortConv) {
      MOE_ASSIGN_OR_RETURN(L.conv_in, Matrix(name("shortconv.in_proj")));
      MOE_ASSIGN_OR_RETURN(L.conv_kernel, Vector(name("shortconv.conv")));
      MOE_ASSIGN_OR_RETURN(L.wo, Matrix(name("shortconv.out_proj")));
      L.dense_bytes = L.conv_in.byte_size() + L.wo.byte_size();
    } else if (L.parts.attention == AttentionPart::kMamba2) {
      MOE_ASSIGN_OR_RETURN(L.ssm_in, Matrix(name("ssm_in")));
      MOE_ASSIGN_OR_RETURN(L.ssm_conv, Vector(name("ssm_conv1d")));
      MOE_ASSIGN_OR_RETURN(L.ssm_conv_bias, Vector(bias("ssm_conv1d")));
      MOE_ASSIGN_OR_RETURN(L.ssm_dt_bias, Vector(bias("ssm_dt")));
      MOE_ASSIGN_OR_RETURN(L.ssm_a, Vector(LayerBareName(l, "ssm_a")));
      MOE_ASSIGN_OR_RETURN(L.ssm_d, Vector(LayerBareName(l, "ssm_d")));
      MOE_ASSIGN_OR_RETURN(L.ssm_norm, Vector(name("ssm_norm")));
      MOE_ASSIGN_OR_RETURN(L.wo, Matrix(name("ssm_out")));
      L.dense_bytes = L.ssm_in.byte_size() + L.wo.byte_size();
    } else if (L.parts.attention == AttentionPart::kGatedDeltaNet) {
      MOE_ASSIGN_OR_RETURN(L.ssm_in, Matrix(name("attn_qkv")));
      MOE_ASSIGN_OR_RETURN(L.ssm_z, Matrix(name("attn_gate")));
      if (h.ssm_grouped_heads) {  // one matrix of both, ssm_alpha empty
        MOE_ASSIGN_OR_RETURN(L.ssm_beta, Matrix(name("ssm_ba")));
      } else {
        MOE_ASSIGN_OR_RETURN(L.ssm_beta, Matrix(name("ssm_beta")));
        MOE_ASSIGN_OR_RETURN(L.ssm_alpha, Matrix(name("ssm_alpha")));
      }
      MOE_ASSIGN_OR_RETURN(L.ssm_conv, Vector(name("ssm_conv1d")));
      MOE_ASSIGN_OR_RETURN(L.ssm_dt_bias, Vector(bias("ssm_dt")));
      MOE_ASSIGN_OR_RETURN(L.ssm_a, Vector(LayerBareName(l, "ssm_a")));
      MOE_ASSIGN_OR_RETURN(L.ssm_norm, Vector(name("ssm_norm")));
      MOE_ASSIGN_OR_RETURN(L.wo, Matrix(name("ssm_out")));
      L.dense_bytes = L.ssm_in.byte_size() + L.ssm_z.byte_size() + L.ssm_beta.byte_size() +
                      L.ssm_alpha.byte_size() + L.wo.byte_size();
    } else if (L.parts.attention == AttentionPart::kNone) {
      // A feed-forward-only layer: its attn_norm is the feed-forward part's norm.
    } else if (L.parts.attention == AttentionPart::kLatent) {
      MOE_ASSIGN_OR_RETURN(L.wo, Matrix(name("attn_output")));
      if (h.q_lora_rank > 0) {
        MOE_ASSIGN_OR_RETURN(L.wq_a, Matrix(name("attn_q_a")));
        MOE_ASSIGN_OR_RETURN(L.q_a_norm, Vector(name("attn_q_a_norm")));
        MOE_ASSIGN_OR_RETURN(L.wq_b, Matrix(name("attn_q_b")));
      } else {
        MOE_ASSIGN_OR_RETURN(L.wq, Matrix(name("attn_q")));
      }
      MOE_ASSIGN_OR_RETURN(L.wkv_a, Matrix(name("attn_kv_a_mqa")));
      MOE_ASSIGN_OR_RETURN(L.kv_a_norm, Vector(name("attn_kv_a_norm")));
      MOE_ASSIGN_OR_RETURN(L.wk_b, Matrix(name("attn_k_b")));
      MOE_ASSIGN_OR_RETURN(L.wv_b, Matrix(name("attn_v_b")));
      L.dense_bytes = L.wq.byte_size() + L.wq_a.byte_size() + L.wq_b.byte_size() +
                      L.wkv_a.byte_size() + L.wk_b.byte_size() + L.wv_b.byte_size() +
                      L.wo.byte_size();
    } else {
      MOE_ASSIGN_OR_RETURN(L.wo, Matrix(name("attn_output")));
      MOE_RETURN_IF_ERROR(ResolveGroupedQueryAttention(l, L));
    }
    if (L.parts.ffn == FeedForwardPart::kNone) continue;
    MOE_ASSIGN_OR_RETURN(L.ffn_norm, Vector(name(L.parts.ffn_norm)));
    if (L.parts.ffn == FeedForwardPart::kDense) {
      MOE_ASSIGN_OR_RETURN(L.dense.gate, Matrix(name("ffn_gate")));
      MOE_ASSIGN_OR_RETURN(L.dense.up, Matrix(name("ffn_up")));
      MOE_ASSIGN_OR_RETURN(L.dense.down, Matrix(name("ffn_down")));
      L.dense_bytes += L.dense.byte_size();
      continue;
    }
    MOE_ASSIGN_OR_RETURN(L.router, Matrix(name("ffn_gate_inp")));
    if (h.has_selection_bias) {
      MOE_ASSIGN_OR_RETURN(L.selection_bias, Vector(bias("exp_probs_b")));
    }
    if (h.has_router_bias) {
      MOE_ASSIGN_OR_RETURN(L.router_bias, Vector(bias("ffn_gate_inp")));
    }
    MOE_RETURN_IF_ERROR(ResolveExperts(l, L));
    L.dense_bytes += L.router.byte_size();
    if (h.moe_latent_dim > 0) {
      MOE_ASSIGN_OR_RETURN(L.latent_down, Matrix(name("ffn_latent_down")));
      MOE_ASSIGN_OR_RETURN(L.latent_up, Matrix(name("ffn_latent_up")));
      L.dense_bytes += L.latent_down.byte_size() + L.latent_up.byte_size();
    }
    if (h.n_ff_shared > 0) {
      L.has_shared = true;
      if (!h.relu_squared_ffn) {
        MOE_ASSIGN_OR_RETURN(L.shared.gate, Matrix(name("ffn_gate_shexp")));
      }
      MOE_ASSIGN_OR_RETURN(L.shared.up, Matrix(name("ffn_up_shexp")));
      MOE_ASSIGN_OR_RETURN(L.shared.down, Matrix(name("ffn_down_shexp")));
      if (h.shared_expert_gate) {
        MOE_ASSIGN_OR_RETURN(L.shared_gate, Matrix(name("ffn_gate_inp_shexp")));
        L.shared_gate.rows = 1;
        L.shared_gate.cols = h.n_embd;
      }
      L.dense_bytes += L.shared.byte_size() + L.shared_gate.byte_size();
    }
  }
  return absl::OkStatus();
}

}  // namespace moe
