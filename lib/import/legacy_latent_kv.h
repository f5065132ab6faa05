// DeepSeek GGUF files from llama.cpp converters before its absorbed layout (until spring 2025:
// most DeepSeek-V2/V2.5/Coder-V2 and early V3/R1 files people download) store each layer's
// kv_b_proj whole, as attn_kv_b [n_head x (nope + v), kv_lora_rank], and give the per-head key
// and value sizes as attention.key_length / value_length with no *_mla keys. llama.cpp still
// runs them, decompressing keys and values per head into a full-size cache. libmoe runs latent
// attention the absorbed way only (the cache holds the latent), from attn_k_b [n_head,
// kv_lora_rank, nope] (each head's key rows, transposed) and attn_v_b [n_head, v, kv_lora_rank];
// this splits the one tensor into the two at import.
#pragma once

#include "absl/status/status.h"
#include "lib/model/model_spec.h"

namespace moe {

// Replaces each layer's attn_kv_b in `spec` by attn_k_b and attn_v_b; `spec->hp` must already
// hold the latent sizes. A layer that has attn_k_b already only loses its unused attn_kv_b.
// attn_v_b keeps attn_kv_b's type and bytes (its rows are whole rows of attn_kv_b). attn_k_b's
// rows run across attn_kv_b's, so its values are gathered and stored again: a float type as it
// was (exactly), a quantized one as Q8_0 (F32 where nope is not a whole number of its blocks),
// which moves each value by at most Q8_0's rounding, far inside the source type's own.
absl::Status SplitLegacyLatentKv(ModelSpec* spec);

// The type attn_k_b gets from an attn_kv_b of type `kv_b` (above).
DType LegacyKeyType(DType kv_b, int64_t nope);

}  // namespace moe
