#include "lib/api/generate_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/api/c_api_support.h"

namespace moe::api {

moe_status ReadSamplerConfig(const moe_sampling_params* params, int32_t n_vocab, uint64_t base_seed,
                             SamplerConfig* out) {
  moe_sampling_params p;
  moe_sampling_params_init(&p, sizeof(p));
  if (moe_status s = ReadVersioned(params, &p, "moe_sampling_params"); s != MOE_OK) return s;
  if (std::isnan(p.temperature) || std::isnan(p.top_p) || std::isnan(p.min_p) ||
      !(p.repeat_penalty > 0)) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                "sampling: temperature/top_p/min_p must be numbers and repeat_penalty > 0");
  }
  if (p.n_logit_bias > 0 && p.logit_bias == nullptr) return Null("sampling.logit_bias");
  SamplerConfig c;
  for (size_t i = 0; i < p.n_logit_bias; ++i) {
    if (p.logit_bias[i].token < 0 || p.logit_bias[i].token >= n_vocab) {
      return Fail(MOE_ERROR_OUT_OF_RANGE,
                  absl::StrCat("logit_bias token ", p.logit_bias[i].token,
                               " outside the vocabulary [0, ", n_vocab, ")"));
    }
    c.logit_bias.push_back({p.logit_bias[i].token, p.logit_bias[i].bias});
  }
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  c.repeat_penalty = p.repeat_penalty;
  c.frequency_penalty = p.frequency_penalty;
  c.presence_penalty = p.presence_penalty;
  c.penalty_last_n = p.penalty_last_n;
  c.seed = base_seed + p.seed;
  *out = std::move(c);
  return MOE_OK;
}

moe_status ReadGenerateOptions(const moe_generate_params* params, int32_t n_vocab,
                               uint64_t base_seed, GenerateOptions* out) {
  moe_generate_params gp;
  moe_generate_params_init(&gp, sizeof(gp));
  if (moe_status s = ReadVersioned(params, &gp, "moe_generate_params"); s != MOE_OK) return s;
  GenerateOptions go;
  if (moe_status s = ReadSamplerConfig(gp.sampling, n_vocab, base_seed, &go.sampling);
      s != MOE_OK) {
    return s;
  }
  if (gp.max_tokens < 0) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                absl::StrCat("max_tokens is ", gp.max_tokens, ": it must be >= 0"));
  }
  if (gp.n_stop > 0 && gp.stop == nullptr) return Null("stop");
  go.max_tokens = gp.max_tokens;
  go.parse_special = gp.parse_special != 0;
  for (size_t i = 0; i < gp.n_stop; ++i) {
    if (gp.stop[i] == nullptr) return Null("a stop string");
    go.stop.emplace_back(gp.stop[i]);
  }
  *out = std::move(go);
  return MOE_OK;
}

moe_status ReadThreadsAndKvType(int32_t n_threads, int32_t kv_type, DType* kv_dtype) {
  constexpr int32_t kMaxThreads = 1024;
  if (n_threads < 0 || n_threads > kMaxThreads) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                absl::StrCat("n_threads is ", n_threads, ": it must be in [0, ", kMaxThreads,
                             "] (0: one per core)"));
  }
  switch (kv_type) {
    case MOE_KV_F32:
      *kv_dtype = DType::kF32;
      return MOE_OK;
    case MOE_KV_F16:
      *kv_dtype = DType::kF16;
      return MOE_OK;
    case MOE_KV_Q8_0:
      *kv_dtype = DType::kQ8_0;
      return MOE_OK;
    default:
      return Fail(MOE_ERROR_INVALID_ARGUMENT, absl::StrCat("unknown kv_type ", kv_type));
  }
}

}  // namespace moe::api
