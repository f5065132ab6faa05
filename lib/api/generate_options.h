// Reading the C ABI's sampling and generation params into the runtime's options: shared by the
// context calls (moe_generate*, moe_sample) and the batching engine's requests.
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
moe_status ReadGenerateOptions(const moe_generate_params* params, int32_t n_vocab,
                               uint64_t base_seed, GenerateOptions* out);

}  // namespace moe::api
