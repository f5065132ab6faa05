// Reading the C ABI's params into the runtime's options where contexts and the batching engine
// share them: sampling and generation (moe_generate*, moe_sample, requests), threads and the KV
// cache type (moe_context_params, moe_engine_params).
#pragma once

#include <cstdint>

#include "include/moe_c.h"
#include "lib/runtime/session.h"
#include "lib/sampling/sampler.h"

namespace moe::api {

// params may be NULL (defaults); the sampler's seed is base_seed + params->seed. Checks every
// field (a NaN, a token outside [0, n_vocab), NULL where a pointer is needed).
moe_status ReadSamplerConfig(const moe_sampling_params* params, int32_t n_vocab, uint64_t base_seed,
                             SamplerConfig* out);
// n_threads in [0, 1024] (0: one per core) and a known moe_kv_type, as the runtime's KV type.
moe_status ReadThreadsAndKvType(int32_t n_threads, int32_t kv_type, DType* kv_dtype);

// The routing policy fields of moe_context_params and moe_engine_params, which name them alike
// (the runtime checks them when the context or engine is created).
template <typename Params>
RoutingPolicy RoutingPolicyOf(const Params& p) {
  static_assert(static_cast<int>(RouterNoise::kGaussian) == MOE_ROUTER_NOISE_GAUSSIAN &&
                    static_cast<int>(RouterNoise::kGumbel) == MOE_ROUTER_NOISE_GUMBEL,
                "moe_router_noise must mirror moe::RouterNoise");
  RoutingPolicy r;
  r.confidence = p.expert_confidence;
  r.min_top_k = p.min_experts;
  r.temperature = p.router_temperature;
  r.noise = static_cast<RouterNoise>(p.router_noise);  // an unknown kind is refused when checked
  r.noise_scale = p.router_noise_scale;
  r.noise_seed = p.router_noise_seed;
  r.capacity_factor = p.expert_capacity_factor;
  r.load_window = p.load_window;
  r.load_limit = p.load_limit;
  return r;
}

moe_status ReadGenerateOptions(const moe_generate_params* params, int32_t n_vocab,
                               uint64_t base_seed, GenerateOptions* out);

}  // namespace moe::api
