// Compares a model with a reference fixture folder (tests/data/fixtures*/<name>/: llama.cpp's
// logits rows, top-16 logits and greedy tokens for two prompts) under the folders' comparison
// rules: F32 math within 1e-3 x max|logit| of the prompt's stored rows, a quantized run within
// the folder's quant_vs_deq.tsv tolerance, greedy tokens identical while the reference's own
// margin exceeds the tolerance.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/base/dtype.h"
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

// How far a KV cache of `kv_type` moves the logits from an F32 cache's, over both prompts and as
// many greedy steps as the references hold (fed the F32 run's tokens): the largest difference
// as a share of the largest |logit|; the steps whose greedy token the two agree on, counting
// only those where the F32 run's margin exceeds twice the largest difference (the others are
// undecided at that precision); and the tokens' expert choices (per layer) that differ, since a
// near tie that the rounding flips changes everything after it.
struct KvTypeDeviation {
  double max_relative_diff = 0;
  int decided_steps = 0;
  int agreeing_steps = 0;
  int64_t expert_choices = 0;
  int64_t changed_choices = 0;
};
absl::StatusOr<KvTypeDeviation> MeasureKvType(const std::filesystem::path& dir,
                                              const std::shared_ptr<const Model>& model,
                                              DType kv_type, int threads);

}  // namespace moe::testing
