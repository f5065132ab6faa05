// Test support: a model's logits over a fixed token sequence (a prompt, every row, then three
// single-token steps) through the backend and K/V memory of an engine's own choice, as a session
// runs them; for comparing where a forward pass runs.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/runtime/engine.h"

namespace moe::testing {

inline absl::StatusOr<std::vector<float>> EngineLogits(const Engine& engine) {
  const std::shared_ptr<const Model>& model = engine.model();
  const HParams& h = model->hp();
  absl::StatusOr<std::unique_ptr<Backend>> backend = engine.CreateBackend(2);
  if (!backend.ok()) return backend.status();
  Transformer tf(model, backend->get());
  engine.PrepareTransformer(&tf, {});
  absl::StatusOr<KvCache> cache = KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim,
                                                  DType::kF16, h.values_in_keys(), {}, **backend);
  if (!cache.ok()) return cache.status();
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 5) % h.n_vocab));
  std::vector<float> all, step;
  if (absl::Status s = tf.Forward({tokens.data(), 9}, *cache, LogitsFor::kAll, &all); !s.ok()) {
    return s;
  }
  for (size_t t = 9; t < tokens.size(); ++t) {
    if (absl::Status s = tf.Forward({&tokens[t], 1}, *cache, LogitsFor::kLast, &step); !s.ok()) {
      return s;
    }
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

}  // namespace moe::testing
