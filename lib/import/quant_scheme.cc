#include "lib/import/quant_scheme.h"

#include "absl/strings/match.h"

namespace moe {

const std::vector<std::string>& QuantSchemeNames() {
  static const std::vector<std::string> kNames = {
      "f32",    "f16",  "bf16",   "q8_0", "q4_0", "q4_1",   "q5_0",   "q5_1",     "q2_k",
      "q3_k_m", "q4_k", "q4_k_m", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4_moe"};
  return kNames;
}

bool IsQuantScheme(const std::string& s) {
  for (const std::string& name : QuantSchemeNames()) {
    if (s == name) return true;
  }
  return false;
}

DType QuantTypeFor(const std::string& scheme, const std::string& name, int64_t cols, int64_t layer,
                   int64_t n_layer, bool one_dimensional) {
  // A convolution's kernel stays F32, as llama-quantize keeps it, and so does Mamba-2's grouped
  // norm (one row per group: a norm's weight, not a matrix).
  if (one_dimensional || absl::StrContains(name, "ffn_gate_inp") ||
      absl::StrContains(name, "shortconv.conv.") || absl::StrContains(name, "ssm_conv1d.") ||
      absl::StrContains(name, "ssm_norm.") || !absl::EndsWith(name, "weight")) {
    return DType::kF32;
  }
  DType t;
  if (scheme == "mxfp4_moe") {
    t = absl::EndsWith(name, "_exps.weight") ? DType::kMXFP4 : DType::kQ8_0;
  } else if (scheme == "f32") {
    t = DType::kF32;
  } else if (scheme == "f16") {
    t = DType::kF16;
  } else if (scheme == "bf16") {
    t = DType::kBF16;
  } else if (scheme == "q8_0") {
    t = DType::kQ8_0;
  } else if (scheme == "q4_0") {
    // llama-quantize keeps the output head at Q6_K in Q4_0 files.
    t = name == "output.weight" ? DType::kQ6_K : DType::kQ4_0;
  } else if (scheme == "q4_1" || scheme == "q5_0" || scheme == "q5_1" || scheme == "iq4_nl" ||
             scheme == "iq4_xs") {
    // One type for every matrix but the head, which llama-quantize gives Q6_K in these files
    // (its attention and down-projection rules for IQ4_XS are not copied).
    t = name == "output.weight" ? DType::kQ6_K : *DTypeFromName(scheme);
  } else if (scheme == "q2_k") {
    // llama.cpp's Q2_K mix, for a model of grouped-query attention: Q6_K head, Q4_K attn_v,
    // Q3_K attn_output and ffn_down, Q2_K elsewhere.
    t = name == "output.weight"                  ? DType::kQ6_K
        : absl::StrContains(name, "attn_v")      ? DType::kQ4_K
        : absl::StrContains(name, "attn_output") ? DType::kQ3_K
        : absl::StrContains(name, "ffn_down")    ? DType::kQ3_K
                                                 : DType::kQ2_K;
  } else if (scheme == "q3_k_m") {
    // llama.cpp's Q3_K_M mix: Q6_K head; attn_v Q5_K in the first two layers, Q4_K after;
    // ffn_down Q5_K in the first sixteenth of the layers, Q4_K after; attn_output Q4_K; Q3_K
    // elsewhere.
    const bool early_v = layer >= 0 && layer < 2;
    const bool early_down = layer >= 0 && layer < n_layer / 16;
    t = name == "output.weight"                  ? DType::kQ6_K
        : absl::StrContains(name, "attn_v")      ? (early_v ? DType::kQ5_K : DType::kQ4_K)
        : absl::StrContains(name, "ffn_down")    ? (early_down ? DType::kQ5_K : DType::kQ4_K)
        : absl::StrContains(name, "attn_output") ? DType::kQ4_K
                                                 : DType::kQ3_K;
  } else if (scheme == "q4_k") {
    t = DType::kQ4_K;
  } else if (scheme == "q5_k") {
    t = DType::kQ5_K;
  } else if (scheme == "q6_k") {
    t = DType::kQ6_K;
  } else {
    // q4_k_m: Q6_K for the head and, in the first and last eighth of the layers and every third
    // layer between, for attn_v and ffn_down; Q4_K elsewhere.
    const bool more_bits =
        layer >= 0 && (layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2);
    if (name == "output.weight" ||
        (more_bits && (absl::StrContains(name, "attn_v") || absl::StrContains(name, "ffn_down")))) {
      t = DType::kQ6_K;
    } else {
      t = DType::kQ4_K;
    }
  }
  return FallbackForRowLength(t, cols);
}

DType FallbackForRowLength(DType t, int64_t cols) {
  if (RowSizeValid(t, cols)) return t;
  // llama-quantize's fallbacks for rows that are not whole 256-value super-blocks, so files of
  // such shapes (gpt-oss's 2880, GLM-4.5-Air's and DeepSeek-V2-Lite's expert width 1408) get the
  // types llama.cpp would give them; F16 when not even 32-value blocks fit.
  DType fallback = DType::kQ8_0;
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K:
      fallback = DType::kQ4_0;
      break;
    case DType::kQ4_K:
      fallback = DType::kQ5_0;
      break;
    case DType::kQ5_K:
      fallback = DType::kQ5_1;
      break;
    case DType::kIQ4_XS:
      fallback = DType::kIQ4_NL;
      break;
    default:
      break;
  }
  return RowSizeValid(fallback, cols) ? fallback : DType::kF16;
}

uint32_t LlamaFileType(const std::string& s) {
  if (s == "f32") return 0;  // LLAMA_FTYPE_ALL_F32
  if (s == "f16") return 1;
  if (s == "q4_0") return 2;
  if (s == "q4_1") return 3;
  if (s == "q8_0") return 7;
  if (s == "q5_0") return 8;
  if (s == "q5_1") return 9;
  if (s == "iq4_nl") return 25;
  if (s == "iq4_xs") return 30;
  if (s == "q2_k") return 10;
  if (s == "q3_k_m") return 12;
  if (s == "q4_k") return 14;  // Q4_K_S
  if (s == "q4_k_m") return 15;
  if (s == "q5_k") return 16;  // Q5_K_S
  if (s == "q6_k") return 18;
  if (s == "bf16") return 32;
  if (s == "mxfp4_moe") return 38;
  return 0;
}

}  // namespace moe
