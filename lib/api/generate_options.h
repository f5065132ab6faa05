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

// The routing policy fields of moe_context_params and moe_engine_params (the runtime checks
// them when the context or engine is created).
RoutingPolicy RoutingPolicyOf(float expert_confidence, int32_t min_experts,
                              float router_temperature, int32_t router_noise,
                              float router_noise_scale, uint64_t router_noise_seed);

moe_status ReadGenerateOptions(const moe_generate_params* params, int32_t n_vocab,
                               uint64_t base_seed, GenerateOptions* out);

}  // namespace moe::api
