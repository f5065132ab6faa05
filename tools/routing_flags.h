// The routing policy's flags, shared by moe-cli run, moe-cli perplexity and moe-bench:
// --expert-confidence T keeps each token's best experts until they hold share T of its top-k
// scores, --min-experts N keeps at least N; --router-temperature divides the router's logits;
// --router-noise gaussian|gumbel with --router-noise-scale and --router-seed adds reproducible
// noise to the logits that choose; --expert-capacity F caps each step's tokens per expert at F x
// the fair share, re-routing the rest; --load-window N with --load-limit L weighs experts down
// that took more than L x their fair share of the last N tokens' choices (lib/moe/router.h).
// All off by default.
#pragma once

#include <map>
#include <string>

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
  app->add_option("--router-temperature", policy->temperature,
                  "divide the router's logits by this before gating (1 = as the model routes)")
      ->check(CLI::Range(1e-3, 1e3));
  static const std::map<std::string, RouterNoise> kNoise = {{"none", RouterNoise::kNone},
                                                            {"gaussian", RouterNoise::kGaussian},
                                                            {"gumbel", RouterNoise::kGumbel}};
  app->add_option("--router-noise", policy->noise,
                  "noise on the logits that choose experts: none, gaussian or gumbel")
      ->transform(CLI::CheckedTransformer(kNoise, CLI::ignore_case));
  app->add_option("--router-noise-scale", policy->noise_scale,
                  "the noise's standard deviation (gaussian) or scale (gumbel)")
      ->check(CLI::Range(0.0, 1e3));
  app->add_option("--router-seed", policy->noise_seed, "seed of the router noise");
  app->add_option("--expert-capacity", policy->capacity_factor,
                  "cap each step's tokens per expert at this factor x the fair share (n x k / "
                  "experts); tokens over it take their next best expert (0 = no cap)")
      ->check(CLI::Range(0.0, 1e3));
  app->add_option("--load-window", policy->load_window,
                  "load-aware re-weighting over this many recent tokens (0 = off)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--load-limit", policy->load_limit,
                  "with --load-window: experts above this multiple of the fair share are weighed "
                  "down")
      ->check(CLI::Range(1.0, 1e3));
}

}  // namespace moe::cli
