#include "lib/import/hparams_from_keys.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

// rope.scaling.*: none, or YaRN with llama.cpp's defaults for what a file leaves out.
absl::Status ReadRopeScaling(const MetadataKeys& r, absl::string_view type, HParams* h) {
  MOE_ASSIGN_OR_RETURN(h->rope_attn_factor, r.Float("rope.scaling.attn_factor", 1.f));
  if (type == "none") return absl::OkStatus();
  if (type.empty() || type == "linear") {
    // llama.cpp takes a file without a type as linear: positions divided by rope.scaling.factor
    // (or the older rope.scale_linear). Not implemented; refused rather than run unscaled.
    float factor = 0.f;
    MOE_ASSIGN_OR_RETURN(factor, r.Float("rope.scaling.factor", 0.f));
    if (!r.Has("rope.scaling.factor")) {
      MOE_ASSIGN_OR_RETURN(factor, r.Float("rope.scale_linear", 0.f));
    }
    if (factor != 0.f && factor != 1.f) {
      return absl::UnimplementedError(absl::StrCat(
          "linear RoPE scaling (factor ", factor, ", positions divided by it",
          type.empty() ? ", as llama.cpp reads a file with a factor and no rope.scaling.type" : "",
          ") is not supported (none, yarn)"));
    }
    return absl::OkStatus();
  }
  if (type != "yarn") {
    return absl::UnimplementedError(
        absl::StrCat("RoPE scaling '", type, "' is not supported (none, yarn)"));
  }
  MOE_ASSIGN_OR_RETURN(h->yarn_factor, r.Float("rope.scaling.factor", 1.f));
  if (h->yarn_factor == 0.f) h->yarn_factor = 1.f;
  MOE_ASSIGN_OR_RETURN(h->yarn_orig_ctx,
                       r.Int("rope.scaling.original_context_length", h->n_ctx_train));
  MOE_ASSIGN_OR_RETURN(h->yarn_beta_fast, r.Float("rope.scaling.yarn_beta_fast", 32.f));
  MOE_ASSIGN_OR_RETURN(h->yarn_beta_slow, r.Float("rope.scaling.yarn_beta_slow", 1.f));
  MOE_ASSIGN_OR_RETURN(h->yarn_log_mul, r.Float("rope.scaling.yarn_log_multiplier", 0.f));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HParams> HParamsFromKeys(const MetadataKeys& r, absl::string_view rope_scaling_type,
                                        const Architecture& arch) {
  HParams h;
  MOE_ASSIGN_OR_RETURN(h.n_embd, r.Int("embedding_length"));
  MOE_ASSIGN_OR_RETURN(h.n_layer, r.Int("block_count"));
  MOE_ASSIGN_OR_RETURN(h.n_head, r.Int("attention.head_count"));
  if (absl::StatusOr<std::vector<int64_t>> per_layer = r.IntArray("attention.head_count_kv");
      per_layer.ok()) {
    // Per layer (LFM2's: 0 for its convolution layers, which the family reads from the same
    // list): the cache's KV heads are the attention layers', which must agree.
    h.n_head_kv = 0;
    for (int64_t kv : *per_layer) {
      if (kv != 0 && h.n_head_kv != 0 && kv != h.n_head_kv) {
        return absl::UnimplementedError(
            absl::StrCat("attention.head_count_kv differs between layers (", h.n_head_kv, " and ",
                         kv, "): not supported"));
      }
      if (kv != 0) h.n_head_kv = kv;
    }
    if (h.n_head_kv <= 0) h.n_head_kv = h.n_head;
  } else {
    MOE_ASSIGN_OR_RETURN(h.n_head_kv, r.Int("attention.head_count_kv", h.n_head));
  }
  if (h.n_head <= 0) return absl::InvalidArgumentError("attention.head_count must be positive");
  MOE_ASSIGN_OR_RETURN(h.head_dim, r.Int("attention.key_length", h.n_embd / h.n_head));
  MOE_ASSIGN_OR_RETURN(h.value_dim, r.Int("attention.value_length", h.head_dim));
  MOE_ASSIGN_OR_RETURN(h.n_ctx_train, r.Int("context_length", 4096));
  MOE_ASSIGN_OR_RETURN(h.n_expert, r.Int("expert_count", 0));
  if (h.n_expert == 0) {
    return absl::UnimplementedError(
        absl::StrCat("'", arch.name(), "' model without experts (", arch.name(),
                     ".expert_count is absent or 0): libmoe runs Mixture-of-Experts models only"));
  }
  MOE_ASSIGN_OR_RETURN(h.n_expert_used, r.Int("expert_used_count"));
  // Per layer (Nemotron-H's: 0 for the layers without a feed-forward part, which the family
  // reads from the same list): the experts' width must then be stated on its own.
  int64_t ff = 0;
  if (!r.IntArray("feed_forward_length").ok()) {
    MOE_ASSIGN_OR_RETURN(ff, r.Int("feed_forward_length", 0));
  }
  MOE_ASSIGN_OR_RETURN(h.n_ff_expert, r.Int("expert_feed_forward_length", ff));
  MOE_ASSIGN_OR_RETURN(float eps, r.Float("attention.layer_norm_rms_epsilon", 1e-5f));
  h.rms_eps = eps;
  MOE_ASSIGN_OR_RETURN(h.rope_freq_base, r.Float("rope.freq_base", 10000.f));
  MOE_ASSIGN_OR_RETURN(h.rope_dim, r.Int("rope.dimension_count", h.head_dim));
  MOE_RETURN_IF_ERROR(ReadRopeScaling(r, rope_scaling_type, &h));
  MOE_RETURN_IF_ERROR(arch.ReadMetadata(r, &h));
  return h;
}

}  // namespace moe
