// Meta's Llama 4 (llama4: Scout 17B-16E, Maverick 17B-128E): llama-style grouped-query
// attention with consecutive-pair RoPE (Llama 3's frequency divisors from rope_freqs), in a
// period of four layers three attend within chunks of 8192 positions and use RoPE followed by an
// unweighted per-head RMS norm of q and k, and the fourth attends to the whole context without
// RoPE, its queries scaled by a temperature growing with the position. Experts in every
// interleave_moe_layer_step-th layer (dense FFNs between), one sigmoid-gated expert per token
// whose weight scales its input rather than its output, beside a shared expert of the experts'
// width. The constants are llama.cpp's (and transformers' Llama4TextConfig defaults), which files
// do not carry; as llama.cpp, Maverick's 128-expert files have no QK-norm.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/arch/families.h"
#include "lib/model/arch/metadata_rules.h"

namespace moe {
namespace {

constexpr int64_t kChunk = 8192;      // attention_chunk_size
constexpr int64_t kPeriod = 4;        // three chunked RoPE layers, then one NoPE layer
constexpr float kTempScale = 0.1f;    // attn_scale
constexpr int64_t kTempFloor = 8192;  // floor_scale
constexpr float kTempOffset = 1.f;    // positions count from 1 in the temperature
constexpr int64_t kNoQkNormExperts = 128;

class Llama4 final : public Architecture {
 public:
  Arch id() const override { return Arch::kLlama4; }
  absl::string_view name() const override { return "llama4"; }

  absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const override {
    h->rope_style = RopeStyle::kNorm;
    MOE_RETURN_IF_ERROR(RequireWholeHeadRope(name(), *h));
    if (keys.Has("attention.sliding_window")) {
      // llama.cpp reads the key only to learn "no chunks, RoPE everywhere" from a 0 (MobileLLM,
      // which has no experts); any other value is not what its graph runs.
      MOE_ASSIGN_OR_RETURN(const int64_t window, keys.Int("attention.sliding_window"));
      if (window == 0) {
        return absl::UnimplementedError(
            "llama4 without chunked attention (attention.sliding_window 0)");
      }
    }
    MOE_ASSIGN_OR_RETURN(h->swa_period, keys.Int("attention.sliding_window_pattern", kPeriod));
    if (h->swa_period != kPeriod) {
      return absl::UnimplementedError(absl::StrCat("llama4 with chunked layers in a period of ",
                                                   h->swa_period, " (NoPE layers every ", kPeriod,
                                                   ": the two periods must agree)"));
    }
    if (keys.Has("rope.freq_base_swa")) {
      return absl::UnimplementedError("llama4 with its own RoPE base on the chunked layers");
    }
    h->sliding_window = kChunk;
    h->window_chunked = true;
    h->nope_period = kPeriod;
    h->attn_temp_scale = kTempScale;
    h->attn_temp_floor = kTempFloor;
    h->attn_temp_offset = kTempOffset;
    h->qk_norm = h->n_expert == kNoQkNormExperts ? QkNorm::kNone : QkNorm::kPerHeadUnweighted;
    MOE_RETURN_IF_ERROR(ReadExpertLayerStep(keys, h));
    h->n_ff_shared = h->n_ff_expert;
    // Sigmoid of the chosen logits, not renormalised, scaling each expert's input.
    h->gating = Gating::kSigmoid;
    h->norm_topk_prob = false;
    MOE_RETURN_IF_ERROR(ReadRoutedScale(keys, h));
    h->expert_input_weighted = true;
    return absl::OkStatus();
  }

  LayerParts Layer(const HParams& h, int layer) const override {
    LayerParts p = MixtureLayer();
    if (!h.layer_has_experts(layer)) p.ffn = FeedForwardPart::kDense;
    if (h.layer_slides(layer)) p.window = h.sliding_window;
    return p;
  }
};

}  // namespace

const Architecture& Llama4Architecture() {
  static const Llama4 kArch;
  return kArch;
}

}  // namespace moe
