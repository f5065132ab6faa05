// The C ABI's opaque handles, as the library sees them (shared by the files of lib/api).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "include/moe_c.h"
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
  std::shared_ptr<const moe::Engine> engine;
  std::unique_ptr<moe::Session> session;
  uint64_t seed;
};

struct moe_detokenizer {
  std::shared_ptr<const moe::Engine> engine;
  std::unique_ptr<moe::StreamDecoder> decoder;
  // Text of a token that did not fit the caller's buffer, kept for the retry.
  std::optional<std::pair<int32_t, std::string>> held;
};
