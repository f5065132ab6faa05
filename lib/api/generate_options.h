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
// The runtime's element type for a moe_kv_type (checked by the caller).
inline DType KvDType(int32_t kv_type) {
  return kv_type == MOE_KV_Q8_0 ? DType::kQ8_0 : kv_type == MOE_KV_F16 ? DType::kF16 : DType::kF32;
}

moe_status ReadGenerateOptions(const moe_generate_params* params, int32_t n_vocab,
                               uint64_t base_seed, GenerateOptions* out);

}  // namespace moe::api
