// Compares a model with a reference fixture folder (tests/data/fixtures*/<name>/: llama.cpp's
// logits rows, top-16 logits and greedy tokens for two prompts) under the folders' comparison
// rules: F32 math within 1e-3 x max|logit| of the prompt's stored rows, a quantized run within
// the folder's quant_vs_deq.tsv tolerance, greedy tokens identical while the reference's own
// margin exceeds the tolerance.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "lib/model/model.h"

namespace moe::testing {

struct FixtureReference {
  std::string suffix;  // "" or ".deq" (llama.cpp on the dequantized weights)
  bool quantize_activations;
  bool relative_tolerance;  // 1e-3 x max|logit|, else the folder's quant_vs_deq tolerance
};

// Checks both prompts with gtest assertions; returns the largest logit error seen over them.
double CheckAgainstFixture(const std::filesystem::path& dir,
                           const std::shared_ptr<const Model>& model, const FixtureReference& ref,
                           int threads);

}  // namespace moe::testing
