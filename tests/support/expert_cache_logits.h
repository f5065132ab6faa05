// Test support: a fixture's prompt run by the engine from a model file, with some of the routed
// experts in the expert cache (read from the file as steps need them) or all resident.
#pragma once

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/session.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/test_files.h"

namespace moe::testing {

// The logits at every position of fixture `fixture`'s prompt p1, the model loaded from `file`
// with `expert_cache_fraction` of the routed experts cached (0: no cache, all resident). With a
// cache the run must have read experts from the file (misses). Empty after a failure.
inline std::vector<float> FixturePromptLogits(const std::string& file, const std::string& fixture,
                                              double expert_cache_fraction) {
  LoadOptions o;
  o.expert_cache_fraction = expert_cache_fraction;
  auto engine = Engine::Load(file, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<float> out;
  if (!engine.ok()) return out;
  EXPECT_EQ((*engine)->expert_store() != nullptr, expert_cache_fraction > 0);
  SessionOptions so;
  so.threads = 2;
  so.n_ctx = 128;
  auto session = Session::Create(*engine, so);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return out;
  const std::vector<int32_t> prompt = ReadIntegers(FixtureDir(fixture) / "p1.tokens.txt");
  EXPECT_TRUE((*session)->Decode(prompt, &out).ok());
  if (expert_cache_fraction > 0) {
    EXPECT_GT((*engine)->expert_store()->cache().stats().misses, 0);
  }
  return out;
}

}  // namespace moe::testing
