// Test support: an engine over a random-weight model (tests/model/reference_model.h) that can
// tokenize and detokenize, with the gpt-oss fixture's vocabulary.
#pragma once

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "lib/import/gguf_import.h"
#include "lib/runtime/engine.h"
#include "tests/model/reference_model.h"

namespace moe::testing {

// Null, with a failure, if it cannot be made.
inline std::shared_ptr<const Engine> RandomEngine(RandomModelOptions m) {
  auto vocab = ImportGguf(std::string(MOE_TESTDATA_DIR) +
                          "/fixtures-v2/tiny-gptoss-f32/tiny-gptoss-f32.gguf");
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  if (!vocab.ok()) return nullptr;
  m.n_vocab = static_cast<int64_t>(vocab->tokenizer.tokens.size());
  ModelSpec spec = MakeRandomModel(m);
  spec.tokenizer = vocab->tokenizer;
  auto made = Engine::FromSpec(std::move(spec));
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *made : nullptr;
}

}  // namespace moe::testing
