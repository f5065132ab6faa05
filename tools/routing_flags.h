// The routing policy's flags, shared by moe-cli run, moe-cli perplexity and moe-bench:
// --expert-confidence T keeps each token's best experts until they hold share T of its top-k
// scores, --min-experts N keeps at least N (lib/moe/router.h). Off by default.
#pragma once

#include "CLI/CLI.hpp"
#include "lib/moe/router.h"

namespace moe::cli {

inline void AddRoutingFlags(CLI::App* app, RoutingPolicy* policy) {
  app->add_option("--expert-confidence", policy->confidence,
                  "dynamic top-k: keep a token's best experts until they hold this share of its "
                  "top-k router scores (0 = always top-k)")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--min-experts", policy->min_top_k,
                  "with --expert-confidence: at least this many experts per token")
      ->check(CLI::Range(1, 1 << 16));
}

}  // namespace moe::cli
