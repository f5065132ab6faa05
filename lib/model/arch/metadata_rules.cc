#include "lib/model/arch/metadata_rules.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moe {

absl::Status ReadRouting(const MetadataKeys& keys, RoutingDefaults defaults, HParams* h) {
  MOE_ASSIGN_OR_RETURN(int64_t gating, keys.Int("expert_gating_func", 0));
  switch (gating) {
    case 0:  // absent (llama.cpp's "none"): the family's own
      h->gating = defaults.gating;
      break;
    case 1:
      h->gating = Gating::kSoftmax;
      break;
    case 2:
      h->gating = Gating::kSigmoid;
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat("expert_gating_func ", gating, " is not supported (1 softmax, 2 sigmoid)"));
  }
  MOE_ASSIGN_OR_RETURN(h->norm_topk_prob,
                       keys.Bool("expert_weights_norm", defaults.norm_topk_prob));
  MOE_RETURN_IF_ERROR(ReadRoutedScale(keys, h));
  MOE_ASSIGN_OR_RETURN(h->n_expert_groups, keys.Int("expert_group_count", 1));
  MOE_ASSIGN_OR_RETURN(h->n_group_used, keys.Int("expert_group_used_count", h->n_expert_groups));
  if (h->n_expert_groups == 0) h->n_expert_groups = h->n_group_used = 1;
  return absl::OkStatus();
}

absl::Status ReadRoutedScale(const MetadataKeys& keys, HParams* h) {
  MOE_ASSIGN_OR_RETURN(h->routed_scale, keys.Float("expert_weights_scale", 1.f));
  if (h->routed_scale == 0.f) h->routed_scale = 1.f;  // llama.cpp writes 0 for "unset"
  return absl::OkStatus();
}

absl::Status ReadMamba2Sizes(const MetadataKeys& keys, HParams* h) {
  MOE_ASSIGN_OR_RETURN(h->ssm_conv_kernel, keys.Int("ssm.conv_kernel"));
  MOE_ASSIGN_OR_RETURN(h->ssm_inner, keys.Int("ssm.inner_size"));
  MOE_ASSIGN_OR_RETURN(h->ssm_state, keys.Int("ssm.state_size"));
  MOE_ASSIGN_OR_RETURN(h->ssm_heads, keys.Int("ssm.time_step_rank"));
  MOE_ASSIGN_OR_RETURN(h->ssm_groups, keys.Int("ssm.group_count"));
  return absl::OkStatus();
}

absl::Status ReadQwenDeltaNetHybrid(absl::string_view family, const MetadataKeys& keys,
                                    HParams* h) {
  h->rope_style = RopeStyle::kNeox;
  h->qk_norm = QkNorm::kPerHead;
  h->attention_output_gate = true;
  h->shared_expert_gate = true;
  MOE_ASSIGN_OR_RETURN(int64_t ff, keys.Int("feed_forward_length", 0));
  MOE_ASSIGN_OR_RETURN(h->n_ff_shared, keys.Int("expert_shared_feed_forward_length", ff));
  MOE_RETURN_IF_ERROR(ReadRouting(keys, {Gating::kSoftmax, /*norm_topk_prob=*/true}, h));
  MOE_RETURN_IF_ERROR(ReadMamba2Sizes(keys, h));
  if (h->ssm_state <= 0 || h->ssm_groups <= 0 || h->ssm_heads % h->ssm_groups != 0 ||
      h->ssm_inner != h->ssm_heads * h->ssm_state) {
    return absl::InvalidArgumentError(absl::StrCat(
        family, "'s gated delta nets need ssm.inner_size (", h->ssm_inner,
        ") = ssm.time_step_rank (", h->ssm_heads, " value heads) x ssm.state_size (", h->ssm_state,
        "), and whole value heads per key head (ssm.group_count ", h->ssm_groups, ")"));
  }
  const int64_t all_layers = h->n_layer;  // with the MTP block, which lists its layer too
  MOE_RETURN_IF_ERROR(ReadNextnLayers(keys, h));
  h->ssm_layers.clear();
  auto recurrent = keys.IntArray("attention.recurrent_layers");
  if (!recurrent.ok() && !absl::IsNotFound(recurrent.status())) {
    // A list that is there but unreadable must not fall back to the interval's guess.
    return absl::InvalidArgumentError(
        absl::StrCat(family, ".attention.recurrent_layers: ", recurrent.status().message()));
  }
  if (recurrent.ok()) {
    if (std::ssize(*recurrent) != all_layers && std::ssize(*recurrent) != h->n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(family, ".attention.recurrent_layers has ",
                                                     recurrent->size(), " entries for ", all_layers,
                                                     " layers"));
    }
    for (int64_t l = 0; l < h->n_layer; ++l) {
      if ((*recurrent)[l] != 0) h->ssm_layers.push_back(l);
    }
    return absl::OkStatus();
  }
  MOE_ASSIGN_OR_RETURN(const int64_t interval, keys.Int("full_attention_interval", 4));
  if (interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(family, ".full_attention_interval ", interval, " (at least 1)"));
  }
  for (int64_t l = 0; l < h->n_layer; ++l) {
    if ((l + 1) % interval != 0) h->ssm_layers.push_back(l);
  }
  return absl::OkStatus();
}

LayerParts QwenDeltaNetHybridLayer(const HParams& h, int layer) {
  LayerParts p = MixtureLayer("post_attention_norm");
  if (h.layer_ssm(layer)) p.attention = AttentionPart::kGatedDeltaNet;
  return p;
}

absl::Status ReadRopeSections(absl::string_view family, const MetadataKeys& keys, HParams* h) {
  auto sections = keys.IntArray("rope.dimension_sections");
  if (!sections.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(family, " needs rope.dimension_sections: ", sections.status().message()));
  }
  if (sections->size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.dimension_sections has ", sections->size(), " values, not 4"));
  }
  int64_t sum = 0;
  for (int i = 0; i < 4; ++i) {
    if ((*sections)[i] < 0 || (*sections)[i] > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.dimension_sections [", absl::StrJoin(*sections, ", "), "]"));
    }
    h->rope_sections[i] = (*sections)[i];
    sum += (*sections)[i];
  }
  if (sum == 0) return absl::InvalidArgumentError("rope.dimension_sections are all 0");
  return absl::OkStatus();
}

absl::Status ReadLeadingDenseLayers(const MetadataKeys& keys, HParams* h) {
  MOE_ASSIGN_OR_RETURN(h->n_layer_dense, keys.Int("leading_dense_block_count", 0));
  if (h->n_layer_dense > 0) {
    MOE_ASSIGN_OR_RETURN(h->n_ff_dense, keys.Int("feed_forward_length"));
  }
  return absl::OkStatus();
}

absl::Status ReadExpertLayerStep(const MetadataKeys& keys, HParams* h) {
  MOE_ASSIGN_OR_RETURN(h->moe_layer_step, keys.Int("interleave_moe_layer_step", 1));
  if (h->moe_layer_step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("interleave_moe_layer_step ", h->moe_layer_step, " (at least 1)"));
  }
  if (h->moe_layer_step > 1 && h->n_ff_dense <= 0) {
    MOE_ASSIGN_OR_RETURN(h->n_ff_dense, keys.Int("feed_forward_length"));
  }
  return absl::OkStatus();
}

absl::Status ReadSharedExperts(const MetadataKeys& keys, HParams* h) {
  MOE_ASSIGN_OR_RETURN(int64_t count, keys.Int("expert_shared_count", 0));
  if (count > 1024) return absl::InvalidArgumentError("expert_shared_count out of range");
  h->n_ff_shared = count * h->n_ff_expert;
  return absl::OkStatus();
}

absl::Status ReadNextnLayers(const MetadataKeys& keys, HParams* h) {
  MOE_ASSIGN_OR_RETURN(h->n_nextn_layer, keys.Int("nextn_predict_layers", 0));
  if (h->n_nextn_layer >= h->n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("nextn_predict_layers ", h->n_nextn_layer,
                                                   " leaves none of the ", h->n_layer,
                                                   " blocks to run"));
  }
  h->n_layer -= h->n_nextn_layer;
  return absl::OkStatus();
}

absl::Status RequireWholeHeadRope(absl::string_view family, const HParams& h) {
  if (h.rope_dim == h.head_dim) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(family, " rotates the whole head (", h.head_dim,
                                               " dimensions); the file says rope.dimension_count ",
                                               h.rope_dim));
}

void SoftmaxRenormalisedRouting(HParams* h) {
  h->gating = Gating::kSoftmax;
  h->norm_topk_prob = true;
  h->routed_scale = 1.f;
}

absl::Status ReadGraniteMultipliers(const MetadataKeys& keys, HParams* h) {
  // Absent or 0 (llama.cpp's "none") is 1.
  auto multiplier = [&](absl::string_view key, float* out) -> absl::Status {
    MOE_ASSIGN_OR_RETURN(const float v, keys.Float(key, 1.f));
    *out = v == 0.f ? 1.f : v;
    return absl::OkStatus();
  };
  MOE_RETURN_IF_ERROR(multiplier("embedding_scale", &h->embedding_scale));
  MOE_RETURN_IF_ERROR(multiplier("residual_scale", &h->residual_scale));
  // 0 is no "none" here (the logits are divided by it): ValidateModelSpec refuses it.
  MOE_ASSIGN_OR_RETURN(h->logit_scale, keys.Float("logit_scale", 1.f));
  MOE_ASSIGN_OR_RETURN(h->kq_scale, keys.Float("attention.scale", 0.f));
  return absl::OkStatus();
}

void AttentionBiasesFromTensors(const ModelSpec& spec, HParams* h) {
  // The first layer that attends tells (a convolution layer, a Mamba-2 layer or a feed-forward
  // part alone has none to tell).
  for (int l = 0; l < h->n_layer; ++l) {
    if (h->layer_ssm(l) || h->layer_short_conv(l) || h->layer_ffn_only(l)) continue;
    h->has_qkv_bias = spec.Find(LayerBiasName(l, "attn_q")) != nullptr;
    h->has_attn_out_bias = spec.Find(LayerBiasName(l, "attn_output")) != nullptr;
    return;
  }
}

QkNorm QkNormFromTensors(const ModelSpec& spec, const HParams& h) {
  const TensorSpec* t = spec.Find(LayerTensorName(0, "attn_q_norm"));
  if (t == nullptr || t->shape.size() != 1) return QkNorm::kNone;
  return t->shape[0] == h.head_dim ? QkNorm::kPerHead : QkNorm::kFull;
}

}  // namespace moe
