// What an architecture is made of. Each family is one file in this folder: it reads the
// metadata keys only it has, sets what it implies when a file does not say, and names the parts
// each of its layers is built from. The forward pass runs those parts; it never asks which
// family it runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "lib/model/model_spec.h"

namespace moe {

// A file's hyper-parameter keys of one family, named without the family prefix (GGUF's
// "qwen2moe.expert_count" is "expert_count").
class MetadataKeys {
 public:
  virtual ~MetadataKeys() = default;
  // Absent keys take `def`; without one, an absent key is an error naming it.
  virtual absl::StatusOr<int64_t> Int(absl::string_view key,
                                      std::optional<int64_t> def = {}) const = 0;
  virtual absl::StatusOr<float> Float(absl::string_view key, float def) const = 0;
  virtual absl::StatusOr<bool> Bool(absl::string_view key, bool def) const = 0;
  virtual bool Has(absl::string_view key) const = 0;
  // An integer array: only files have them (elsewhere: NotFound, as for an absent key).
  virtual absl::StatusOr<std::vector<int64_t>> IntArray(absl::string_view key) const {
    return absl::NotFoundError(absl::StrCat("no array '", key, "'"));
  }
};

// No keys at all: every value takes the family's default (models built in memory).
class NoMetadata final : public MetadataKeys {
 public:
  absl::StatusOr<int64_t> Int(absl::string_view key,
                              std::optional<int64_t> def = {}) const override;
  absl::StatusOr<float> Float(absl::string_view, float def) const override { return def; }
  absl::StatusOr<bool> Bool(absl::string_view, bool def) const override { return def; }
  bool Has(absl::string_view) const override { return false; }
};

enum class AttentionPart {
  kGroupedQuery,   // q/k/v projections, K and V cached per KV head
  kLatent,         // DeepSeek's multi-head latent attention: a compressed latent cached
  kShortConv,      // LFM2's gated short convolution: the last few positions' inputs cached
  kMamba2,         // a Mamba-2 mixer: its convolution's last inputs and a recurrent state cached
  kGatedDeltaNet,  // a gated delta net (Qwen3.5): as kMamba2, a convolution and a state cached
  kNone,  // a feed-forward-only layer (Nemotron-H): nothing mixes positions, nothing cached
};
enum class FeedForwardPart { kDense, kMixture, kNone /* a mixer-only layer (Nemotron-H) */ };

// One layer's parts, in the order they run: attention (after attn_norm), then the feed-forward
// part after the norm named ffn_norm, each added to the residual stream.
struct LayerParts {
  AttentionPart attention = AttentionPart::kGroupedQuery;
  FeedForwardPart ffn = FeedForwardPart::kMixture;
  absl::string_view ffn_norm = "ffn_norm";  // base name of the pre-FFN norm's tensor
  // Sliding window of the attention (0: none). A convolution (short or Mamba-2's) has none: its
  // kernel's last rows are carried in a slot (KvLayerRows::Convolution).
  int64_t window = 0;
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  virtual Arch id() const = 0;
  // As llama.cpp writes it in GGUF's general.architecture.
  virtual absl::string_view name() const = 0;
  // Called after the keys every family shares (sizes, heads, experts, norm epsilon, RoPE base
  // and dimensions, expert_weights_norm) are in `h`: sets what the family implies and reads its
  // own keys. An unsupported variant is an error saying what it is.
  virtual absl::Status ReadMetadata(const MetadataKeys& keys, HParams* h) const = 0;
  // What a file says by the tensors it has rather than by keys (an optional QK-norm).
  virtual void FromTensors(const ModelSpec& spec, HParams* h) const {}
  virtual LayerParts Layer(const HParams& h, int layer) const = 0;
  // The final norm's tensor (LFM2's files name it token_embd_norm).
  virtual absl::string_view output_norm() const { return "output_norm.weight"; }
};

// Every supported architecture's, and the one a file names.
const Architecture& ArchitectureOf(Arch a);
absl::StatusOr<const Architecture*> FindArchitecture(absl::string_view name);
// "llama, qwen2moe, ..." for messages.
std::string SupportedArchitectureNames();

// Parts shared by the families that build every layer alike.
LayerParts MixtureLayer(absl::string_view ffn_norm = "ffn_norm");

}  // namespace moe
