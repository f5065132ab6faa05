// Generation options for tests that compare tokens: greedy, exactly max_tokens of them (tiny and
// random models end their turns at random, so the end of generation does not stop them).
#pragma once

#include <cstdint>

#include "lib/runtime/session.h"

namespace moe::testing {

inline GenerateOptions Greedy(int64_t max_tokens) {
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_tokens = max_tokens;
  g.stop_at_eog = false;
  return g;
}

}  // namespace moe::testing
