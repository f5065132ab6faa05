// The C ABI's opaque handles, as the library sees them (shared by the files of lib/api).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "include/moe_c.h"
#include "lib/dist/communicator.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/session.h"
#include "lib/tokenizer/stream_decoder.h"

struct moe_model {
  std::shared_ptr<const moe::Engine> engine;
  std::string architecture;
  std::string name;
};

// Contexts and detokenizers share the engine rather than point at the moe_model handle: the model
// may be freed while they are still in use, and the engine goes when the last of them does.
struct moe_context {
  // A context over a world of ranks (moe_dist_context_create) keeps its communicator; it goes
  // after the session, whose last words close the other ranks' mirrors.
  std::shared_ptr<moe::Communicator> world;
  std::shared_ptr<const moe::Engine> engine;
  std::unique_ptr<moe::Session> session;
  uint64_t seed;
};

struct moe_dist {
  std::shared_ptr<moe::Communicator> world;
  // Rank 0: a model was loaded whose serving ranks have not been told to stop yet.
  std::atomic<bool> serving{false};
};

namespace moe::api {
// moe_model_load, moe_context_create and moe_engine_create, for the plain and the distributed entry
// points: `lo` carries what the caller decided besides params (a rank's share of the experts);
// `world` is null for a context of one process.
moe_status LoadModel(const char* path, const moe_model_params* params, moe::LoadOptions lo,
                     moe_model** out);
moe_status CreateContext(moe_model* model, const moe_context_params* params,
                         std::shared_ptr<moe::Communicator> world, moe_context** out);
// moe_engine_create, and moe_dist_engine_create with the world (null: one process).
moe_status CreateEngine(moe_model* model, const moe_engine_params* params,
                        std::shared_ptr<moe::Communicator> world, moe_engine** out);
}  // namespace moe::api

struct moe_detokenizer {
  std::shared_ptr<const moe::Engine> engine;
  std::unique_ptr<moe::StreamDecoder> decoder;
  // Text of a token that did not fit the caller's buffer, kept for the retry.
  std::optional<std::pair<int32_t, std::string>> held;
};
