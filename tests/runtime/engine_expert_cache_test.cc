// The engine with the expert cache (the disk tier): outputs bit-identical to the resident run at
// every budget down to the smallest legal one, on every SIMD level; a budget below that is an
// error naming the minimum; a read error fails the call that needed the expert and leaves the
// context usable; a model file changed on disk is detected; a Hugging Face checkpoint's shards
// serve it as a model file does.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/format/moe_writer.h"
#include "lib/import/model_loader.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/session.h"
#include "lib/runtime/weight_copy.h"
#include "tests/hf/checkpoint_builder.h"
#include "tests/hf/gguf_as_hf.h"
#include "tests/model/reference_model.h"
#include "tests/support/fixture_dirs.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string Gguf(const std::string& name) {
  return testing::FixtureGguf(testing::FixtureDir(name));
}

std::vector<int32_t> PromptOf(const std::string& name) {
  std::ifstream f(testing::FixtureDir(name) / "p2.tokens.txt");
  std::vector<int32_t> ids;
  for (int32_t x; f >> x;) ids.push_back(x);
  return ids;
}

// Every prompt position's logits, then greedy decode steps' logits.
std::vector<float> LogitsOf(const std::shared_ptr<const Engine>& engine,
                            const std::vector<int32_t>& prompt, int steps) {
  SessionOptions so;
  so.threads = 2;
  so.n_ctx = 128;
  auto session = Session::Create(engine, so);
  EXPECT_TRUE(session.ok()) << session.status();
  std::vector<float> all;
  absl::Status s = (*session)->Decode(prompt, &all);
  EXPECT_TRUE(s.ok()) << s;
  const int64_t v = engine->model()->hp().n_vocab;
  for (int i = 0; i < steps && s.ok(); ++i) {
    auto l = (*session)->logits();
    const int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    s = (*session)->Decode({&t, 1});
    EXPECT_TRUE(s.ok()) << s;
    all.insert(all.end(), (*session)->logits().begin(), (*session)->logits().end());
  }
  EXPECT_EQ(static_cast<int64_t>(all.size()) % v, 0);
  return all;
}

std::shared_ptr<const Engine> Load(const std::string& path, size_t bytes, double fraction,
                                   bool prefetch = true) {
  LoadOptions o;
  o.expert_cache_bytes = bytes;
  o.expert_cache_fraction = fraction;
  o.expert_prefetch = prefetch;
  auto engine = Engine::Load(path, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *engine : nullptr;
}

class ExpertCacheEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertCacheEngineTest, BitIdenticalToResidentAtEveryBudgetAndLevel) {
  const std::string path = Gguf(GetParam());
  const std::vector<int32_t> prompt = PromptOf(GetParam());
  const SimdLevel native = ActiveSimdLevel();
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
    if (level > DetectedSimdLevel()) continue;
    SetSimdLevelForTesting(level);  // loads re-lay for this level, experts arriving too
    SCOPED_TRACE(CpuSimdLevelName(level));
    auto resident = Engine::Load(path, {});
    ASSERT_TRUE(resident.ok());
    const std::vector<float> want = LogitsOf(*resident, prompt, 6);
    auto full = Load(path, 0, 1.0);
    ASSERT_NE(full, nullptr);
    const size_t slot = full->expert_store()->slot_bytes();
    const size_t k = static_cast<size_t>(full->model()->hp().n_expert_used);
    EXPECT_EQ(LogitsOf(full, prompt, 6), want) << "100%";
    for (double fraction : {0.5, 0.25}) {
      // A model with few experts (one mixture layer of 8) holds fewer than top-k at 25%: that
      // budget is an error (ABudgetBelowOneStepIsAnErrorNamingTheMinimum), not a partial cache.
      if (fraction * static_cast<double>(full->expert_store()->cache().slot_count()) < k) continue;
      auto part = Load(path, 0, fraction);
      ASSERT_NE(part, nullptr);
      EXPECT_EQ(LogitsOf(part, prompt, 6), want) << fraction;
      EXPECT_GT(part->expert_store()->cache().stats().misses, 0);
    }
    // The smallest legal budget: one layer's top-k at once, every other expert read again.
    auto smallest = Load(path, k * slot, 0);
    ASSERT_NE(smallest, nullptr);
    EXPECT_EQ(smallest->expert_store()->cache().slot_count(), k);
    EXPECT_EQ(LogitsOf(smallest, prompt, 6), want) << "top-k slots";
    const ExpertCacheStats st = smallest->expert_store()->cache().stats();
    EXPECT_GT(st.evictions, 0);
    // Every read a step's miss or a guess. A mixture layer's guesses for the next find every slot
    // held by its own step here; a dense layer's guesses for the mixture layer after it (the
    // leading dense layers of DeepSeek and GLM) find them free.
    EXPECT_EQ(st.bytes_loaded, (st.misses + st.prefetches) * static_cast<int64_t>(slot));
    const bool dense_first = smallest->model()->layers()[0].parts.ffn == FeedForwardPart::kDense;
    if (!dense_first) {
      EXPECT_EQ(st.prefetches, 0);
    }
  }
  SetSimdLevelForTesting(native);
}

// Pre-gating reads ahead what the next layer's router picks for the current hidden state: the
// guesses are scored against what the layer then selects, and change no result.
TEST_P(ExpertCacheEngineTest, PrefetchGuessesAheadAndChangesNoResult) {
  const std::string path = Gguf(GetParam());
  const std::vector<int32_t> prompt = PromptOf(GetParam());
  auto resident = Engine::Load(path, {});
  ASSERT_TRUE(resident.ok());
  const std::vector<float> want = LogitsOf(*resident, prompt, 8);
  // Room beyond one step and the next layer's latest experts (which a guess never evicts).
  auto off = Load(path, 0, 0.75, /*prefetch=*/false);
  ASSERT_NE(off, nullptr);
  EXPECT_EQ(LogitsOf(off, prompt, 8), want);
  const ExpertCacheStats none = off->expert_store()->cache().stats();
  EXPECT_EQ(none.prefetches, 0);
  EXPECT_EQ(none.predicted, 0);
  auto on = Load(path, 0, 0.75);
  ASSERT_NE(on, nullptr);
  EXPECT_EQ(LogitsOf(on, prompt, 8), want);
  const ExpertCache& cache = on->expert_store()->cache();
  const ExpertCacheStats st = cache.stats();
  EXPECT_GT(st.prefetches, 0);
  EXPECT_GT(st.predicted, 0);
  EXPECT_GT(st.predicted_right, 0);  // far better than nothing, even on random weights
  EXPECT_LE(st.predicted_right, st.predicted);
  EXPECT_LE(st.prefetch_hits, st.prefetches);
  // Every read is a step's miss or a guess; per layer the counts add up to the totals.
  EXPECT_EQ(st.bytes_loaded % static_cast<int64_t>(cache.slot_bytes()), 0);
  EXPECT_LE(st.bytes_loaded / static_cast<int64_t>(cache.slot_bytes()), st.misses + st.prefetches);
  const std::vector<ExpertCacheStats> layers = cache.layer_stats();
  ASSERT_EQ(static_cast<int>(layers.size()), on->model()->hp().n_layer);
  ExpertCacheStats sum;
  for (const ExpertCacheStats& l : layers) sum += l;
  EXPECT_EQ(sum.hits, st.hits);
  EXPECT_EQ(sum.misses, st.misses);
  EXPECT_EQ(sum.prefetches, st.prefetches);
  EXPECT_EQ(layers[0].predicted, 0);  // nothing guesses the first layer
  std::printf("%s: prediction recall %.0f%% (%lld experts), %lld guesses read, %lld used\n",
              GetParam().c_str(), 100.0 * st.predicted_right / st.predicted,
              static_cast<long long>(st.predicted), static_cast<long long>(st.prefetches),
              static_cast<long long>(st.prefetch_hits));
}

TEST_P(ExpertCacheEngineTest, ABudgetBelowOneStepIsAnErrorNamingTheMinimum) {
  auto full = Load(Gguf(GetParam()), 0, 1.0);
  ASSERT_NE(full, nullptr);
  const size_t slot = full->expert_store()->slot_bytes();
  const size_t k = static_cast<size_t>(full->model()->hp().n_expert_used);
  LoadOptions o;
  o.expert_cache_bytes = k * slot - 1;
  auto small = Engine::Load(Gguf(GetParam()), o);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find(std::to_string(k * slot)), std::string::npos)
      << small.status();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertCacheEngineTest,
                         // The newer families too: MXFP4 experts with biases (gpt-oss),
                         // leading dense layers, shared experts and group routing (deepseek2),
                         // a skipped MTP block (glm4moe).
                         ::testing::Values("tiny-qwen2moe-q4_0", "tiny-llama-moe-q8_0",
                                           "tiny-olmoe-q8_0", "tiny-olmoe-f32", "tiny-gptoss-mxfp4",
                                           "tiny-deepseek3-q8_0", "tiny-deepseek2lite-f32",
                                           "tiny-glm4moe-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A checkpoint whose experts are stored as they run (one matrix per expert, F32 here) is read by
// the cache from its shards, each expert from whichever shard holds it: bit-identical to loading
// it resident, at every budget. Experts converted at load (gpt-oss's stacked ones) are refused
// with the reason.
TEST(ExpertCacheEngineHfTest, ACheckpointsShardsServeTheCache) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("hf_expert_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const nlohmann::json config = testing::TinyConfig("Qwen3MoeForCausalLM");
  std::map<std::string, testing::RawTensor> first, second;
  for (auto& [name, t] : testing::TinyTensors(config, 17)) {
    // Layer 0 and half of layer 1's experts in one shard, the rest in the other.
    const bool late = name.find("layers.1.") != std::string::npos &&
                      (name.find("experts.2.") != std::string::npos ||
                       name.find("experts.3.") != std::string::npos ||
                       name.find("experts.") == std::string::npos);
    (late || name.find("lm_head") != std::string::npos ? second : first)[name] = t;
  }
  testing::WriteSafetensors(dir / "model-00001-of-00002.safetensors", first);
  testing::WriteSafetensors(dir / "model-00002-of-00002.safetensors", second);
  std::ofstream(dir / "config.json") << config.dump();
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 33, 17, 8, 4, 21, 30};
  auto resident = Engine::Load(dir.string(), {});
  ASSERT_TRUE(resident.ok()) << resident.status();
  const std::vector<float> want = LogitsOf(*resident, prompt, 6);
  for (double fraction : {1.0, 0.5, 0.25}) {
    auto cached = Load(dir.string(), 0, fraction);
    ASSERT_NE(cached, nullptr);
    ASSERT_NE(cached->expert_store(), nullptr);
    EXPECT_EQ(cached->expert_store()->n_files(), 2u);
    EXPECT_EQ(LogitsOf(cached, prompt, 6), want) << fraction;
    EXPECT_GT(cached->expert_store()->cache().stats().misses, 0);
  }

  const fs::path gptoss = dir / "gptoss";
  testing::WriteGgufAsHfCheckpoint(
      std::string(MOE_TESTDATA_DIR) + "/fixtures-v2/tiny-gptoss-f32/tiny-gptoss-f32.gguf", gptoss);
  LoadOptions o;
  o.expert_cache_fraction = 0.5;
  auto refused = Engine::Load(gptoss.string(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("converted at load"), std::string::npos)
      << refused.status();
  fs::remove_all(dir);
}

// A .moe written with `moe-convert --layout groups` stores the experts as the kernels run them:
// the cache reads them as stored (no re-laying on arrival), and computes exactly what the GGUF
// file's rows re-laid at load compute.
TEST(ExpertCacheEngineGroupsTest, GroupLayoutFilesAreReadAsStored) {
  if (DetectedSimdLevel() < SimdLevel::kAvx2) GTEST_SKIP() << "rows are re-laid from AVX2 up";
  const SimdLevel native = ActiveSimdLevel();
  SetSimdLevelForTesting(SimdLevel::kAvx2);
  const std::string name = "tiny-qwen2moe-q4_0";
  const std::vector<int32_t> prompt = PromptOf(name);
  auto resident = Engine::Load(Gguf(name), {});
  ASSERT_TRUE(resident.ok());
  const std::vector<float> want = LogitsOf(*resident, prompt, 6);
  const std::string moe = (fs::path(::testing::TempDir()) /
                           ("moe_expert_cache_groups_" + std::to_string(::getpid()) + ".moe"))
                              .string();
  auto spec = LoadModelSpec(Gguf(name));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(CopyWeights(*spec, /*repack=*/true, SimdLevel::kAvx2, nullptr).ok());
  ASSERT_TRUE(WriteMoeFile(*spec, moe).ok());
  auto cached = Load(moe, 0, 0.25);
  ASSERT_NE(cached, nullptr);
  const ExpertStore& store = *cached->expert_store();
  const ExpertSource& src = store.source(0, 0);
  EXPECT_GT(RowGroup(src.gate.dtype), 1) << "the file stores the group layout";
  EXPECT_EQ(LogitsOf(cached, prompt, 6), want);
  EXPECT_GT(store.cache().stats().misses, 0);
  fs::remove(moe);
  SetSimdLevelForTesting(native);
}

// Ungated experts (Nemotron-H's relu^2: up and down, no gate) take slots of two matrices and run
// from the cache as they run resident, at half the budget and at the smallest one; latent ones
// (Nemotron 3 Super's) take slots of their smaller rows.
TEST(ExpertCacheEngineUngatedTest, UngatedExpertsRunFromTheCacheAsResident) {
  for (const int64_t latent : {0, 32}) {
    SCOPED_TRACE(latent);
    testing::RandomModelOptions m;
    m.moe_latent = latent;
    m.arch = Arch::kNemotronHMoe;
    m.n_layer = 5, m.layer_pattern = "ME*EM", m.n_embd = 64, m.n_head = 4, m.head_dim = 16;
    m.n_ff_expert = 32, m.n_ff_shared = 64, m.selection_bias = true, m.dtype = DType::kQ8_0;
    m.ssm_groups = 1, m.ssm_state = 16, m.seed = 41;
    const std::string moe = (fs::path(::testing::TempDir()) /
                             ("moe_expert_cache_ungated_" + std::to_string(::getpid()) + ".moe"))
                                .string();
    ASSERT_TRUE(WriteMoeFile(testing::MakeRandomModel(m), moe).ok());
    auto resident = Engine::Load(moe, {});
    ASSERT_TRUE(resident.ok()) << resident.status();
    const std::vector<int32_t> prompt = {5, 17, 3, 44, 90, 12, 61, 7, 33};
    const std::vector<float> want = LogitsOf(*resident, prompt, 6);
    // up [32 x X], down [X x 32], X the experts' rows: 64, or the latent size
    const int64_t X = latent > 0 ? latent : 64;
    const size_t slot = 32 * RowBytes(DType::kQ8_0, X) + X * RowBytes(DType::kQ8_0, 32);
    for (double fraction : {0.5, 0.0}) {
      // 0: the smallest budget, one layer's top-k slots.
      auto cached = Load(moe, fraction > 0 ? 0 : 3 * slot, fraction);
      ASSERT_NE(cached, nullptr);
      const ExpertStore& store = *cached->expert_store();
      EXPECT_EQ(store.source(1, 0).gate.bytes(), 0u);
      EXPECT_GT(store.source(1, 0).up.bytes(), 0u);
      EXPECT_EQ(store.slot_bytes(), slot) << "up and down";
      EXPECT_EQ(LogitsOf(cached, prompt, 6), want) << fraction;
      EXPECT_GT(store.cache().stats().misses, 0);
    }
    fs::remove(moe);
  }
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const fs::path p = fs::path(::testing::TempDir()) / (name + std::to_string(::getpid()));
  std::ofstream(p) << text;
  return p.string();
}

// A placement file: resident experts are read at load and held outside the budget, pinned ones
// inside it; both stay in memory whatever the steps read, and the outputs stay exact.
TEST(ExpertPlacementEngineTest, ResidentAndPinnedExpertsStayAndOutputsStayExact) {
  const std::string path = Gguf("tiny-qwen2moe-q4_0");
  const std::vector<int32_t> prompt = PromptOf("tiny-qwen2moe-q4_0");
  auto resident = Engine::Load(path, {});
  ASSERT_TRUE(resident.ok());
  const std::vector<float> want = LogitsOf(*resident, prompt, 6);
  const int k = (*resident)->model()->hp().n_expert_used;
  const std::string placement = WriteTemp(
      "placement.json", R"({"layers": {"0": {"resident": [0, 1]}, "1": {"pinned": [2]}}})");
  auto full = Load(path, 0, 1.0);
  const size_t slot = full->expert_store()->slot_bytes();
  LoadOptions o;
  o.expert_placement_path = placement;
  o.expert_cache_bytes = (1 + k) * slot;  // the pinned one and a step: the least there is
  auto engine = Engine::Load(path, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ExpertStore& store = *(*engine)->expert_store();
  EXPECT_EQ(store.tier(0, 0), ExpertTier::kResident);
  EXPECT_EQ(store.tier(1, 2), ExpertTier::kPinned);
  EXPECT_EQ(store.tier(1, 0), ExpertTier::kCached);
  EXPECT_EQ(store.resident_bytes(), 2 * slot);
  EXPECT_EQ(store.budget_bytes(), (1 + k) * slot);
  EXPECT_EQ(LogitsOf(*engine, prompt, 6), want);
  EXPECT_GT(store.cache().stats().evictions, 0);
  for (auto [l, e] : {std::pair{0, 0}, std::pair{0, 1}, std::pair{1, 2}}) {
    EXPECT_TRUE(store.InMemory(l, e)) << l << "/" << e;
  }
  // One slot less cannot hold the pinned expert and a step: the error names the minimum.
  o.expert_cache_bytes = k * slot;
  auto small = Engine::Load(path, o);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("1 pinned plus the " + std::to_string(k)),
            std::string::npos)
      << small.status();
  EXPECT_NE(small.status().message().find(std::to_string((1 + k) * slot)), std::string::npos);
  // A malformed placement fails the load, naming the file.
  o.expert_placement_path =
      WriteTemp("bad_placement.json", R"({"layers": {"0": {"pinned": [99]}}})");
  auto bad = Engine::Load(path, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(o.expert_placement_path), std::string::npos);
  fs::remove(placement);
  fs::remove(o.expert_placement_path);
}

TEST(ExpertPlacementEngineTest, PinningKeepsAnExpertAndUnpinningLetsItGo) {
  const std::string path = Gguf("tiny-qwen2moe-q4_0");
  const std::vector<int32_t> prompt = PromptOf("tiny-qwen2moe-q4_0");
  auto resident = Engine::Load(path, {});
  ASSERT_TRUE(resident.ok());
  const std::vector<float> want = LogitsOf(*resident, prompt, 6);
  const int k = (*resident)->model()->hp().n_expert_used;
  auto full = Load(path, 0, 1.0);
  const size_t slot = full->expert_store()->slot_bytes();
  auto engine = Load(path, (k + 2) * slot, 0);
  ASSERT_NE(engine, nullptr);
  ExpertStore& store = *engine->expert_store();
  ASSERT_TRUE(store.Pin(1, 3).ok());
  ASSERT_TRUE(store.Pin(1, 3).ok());  // again: nothing changes
  ASSERT_TRUE(store.Pin(0, 5).ok());
  EXPECT_EQ(store.tier(1, 3), ExpertTier::kPinned);
  // A third would leave no room for a step.
  absl::Status full_pin = store.Pin(0, 6);
  EXPECT_EQ(full_pin.code(), absl::StatusCode::kResourceExhausted) << full_pin;
  EXPECT_EQ(LogitsOf(engine, prompt, 6), want);
  EXPECT_TRUE(store.InMemory(1, 3));
  EXPECT_TRUE(store.InMemory(0, 5));
  ASSERT_TRUE(store.Unpin(1, 3).ok());
  EXPECT_EQ(store.tier(1, 3), ExpertTier::kCached);
  EXPECT_TRUE(store.Pin(0, 6).ok());  // room again
  EXPECT_EQ(store.Pin(99, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Unpin(0, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogitsOf(engine, prompt, 6), want);
}

// A model larger than the memory it may take is not loaded whole: the experts stay in the file
// behind a cache sized to fit (or, if asked, the load fails), and the outputs stay exact.
TEST(MemoryFitEngineTest, AModelLargerThanItsMemoryRunsFromAnExpertCacheThatFits) {
  const std::string path = Gguf("tiny-olmoe-q8_0");
  const std::vector<int32_t> prompt = PromptOf("tiny-olmoe-q8_0");
  auto resident = Engine::Load(path, {});
  ASSERT_TRUE(resident.ok());
  EXPECT_EQ((*resident)->expert_store(), nullptr);  // this machine has room for it
  EXPECT_TRUE((*resident)->memory_note().empty());
  const std::vector<float> want = LogitsOf(*resident, prompt, 6);
  size_t weights = 0, dense = 0;
  for (const auto& t : (*resident)->model()->spec().tensors) {
    weights += t.data.size();
    if (t.expert < 0) dense += t.data.size();
  }
  LoadOptions o;
  // Room for the dense weights and about half the experts, with the tenth of headroom.
  o.memory_limit_bytes = (dense + (weights - dense) / 2) * 11 / 10;
  auto fitted = Engine::Load(path, o);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  const ExpertStore* store = (*fitted)->expert_store();
  ASSERT_NE(store, nullptr);
  EXPECT_NE((*fitted)->memory_note().find("expert cache of"), std::string::npos)
      << (*fitted)->memory_note();
  // Resident weights plus the cache, with the tenth of headroom, stay within the limit.
  EXPECT_LE((dense + store->cache().capacity_bytes()) * 11 / 10, o.memory_limit_bytes);
  EXPECT_EQ(LogitsOf(*fitted, prompt, 6), want);
  // Asked to fail instead, it fails and says by how much.
  o.memory_fit = MemoryFit::kError;
  auto refused = Engine::Load(path, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("MiB"), std::string::npos) << refused.status();
  // Not even the dense weights fit: an error, never a load that would be killed.
  o.memory_fit = MemoryFit::kCacheExperts;
  o.memory_limit_bytes = dense / 2;
  auto tiny = Engine::Load(path, o);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(tiny.status().message().find("without the routed experts"), std::string::npos)
      << tiny.status();
  // A mapped model is the page cache's to manage: not checked.
  o.use_mmap = true;
  auto mapped = Engine::Load(path, o);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->expert_store(), nullptr);
}

// A routing profile from one run warms a later load: the experts it chose most are in memory
// before the first token, and the same run then reads less.
TEST(ExpertWarmupEngineTest, AProfileWarmsTheCacheAtLoad) {
  const std::string path = Gguf("tiny-olmoe-q8_0");
  const std::vector<int32_t> prompt = PromptOf("tiny-olmoe-q8_0");
  auto resident = Engine::Load(path, {});
  ASSERT_TRUE(resident.ok());
  const std::vector<float> want = LogitsOf(*resident, prompt, 6);
  // The profile of the prompt, from a context's expert counts.
  SessionOptions so;
  so.n_ctx = 128;
  auto session = Session::Create(*resident, so);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Decode(prompt).ok());
  RoutingProfile profile{(*session)->stats().forward.expert_counts};
  const std::string file = WriteTemp("profile.json", profile.ToJson());

  auto cold = Load(path, 0, 0.5);
  ASSERT_NE(cold, nullptr);
  EXPECT_EQ(LogitsOf(cold, prompt, 6), want);
  const int64_t cold_misses = cold->expert_store()->cache().stats().misses;
  LoadOptions o;
  o.expert_cache_fraction = 0.5;
  o.expert_warmup_path = file;
  auto warm = Engine::Load(path, o);
  ASSERT_TRUE(warm.ok()) << warm.status();
  const ExpertStore& store = *(*warm)->expert_store();
  const std::vector<ExpertKey> hottest = profile.HottestFirst();
  const size_t warmed = std::min(hottest.size(), store.cache().slot_count());
  EXPECT_EQ(store.cache().Resident().size(), warmed);
  for (size_t i = 0; i < warmed; ++i) {
    EXPECT_TRUE(store.InMemory(hottest[i].layer, hottest[i].expert)) << i;
  }
  const int64_t warm_up_reads = store.cache().stats().misses;
  EXPECT_EQ(LogitsOf(*warm, prompt, 6), want);
  EXPECT_LT(store.cache().stats().misses - warm_up_reads, cold_misses);
  // Warming again reads nothing more (no free slot is left, or every hot expert is in).
  auto again = (*warm)->Warm(file);
  ASSERT_TRUE(again.ok());
  // A profile of another model is refused, at load and later.
  const std::string other = WriteTemp("other_profile.json", RoutingProfile{{{1, 2}}}.ToJson());
  o.expert_warmup_path = other;
  EXPECT_EQ(Engine::Load(path, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*warm)->Warm(other).status().code(), absl::StatusCode::kInvalidArgument);
  fs::remove(file);
  fs::remove(other);
}

TEST(ExpertCacheEngineFaultTest, AReadErrorFailsTheCallAndTheContextGoesOn) {
  const std::string path = Gguf("tiny-qwen2moe-q4_0");
  const std::vector<int32_t> prompt = PromptOf("tiny-qwen2moe-q4_0");
  auto resident = Engine::Load(path, {});
  ASSERT_TRUE(resident.ok());
  const std::vector<float> want = LogitsOf(*resident, prompt, 4);
  auto full = Load(path, 0, 1.0);
  const size_t slot = full->expert_store()->slot_bytes();
  auto engine = Load(path, 4 * slot, 0);  // the smallest legal budget: top-4 of one layer
  ASSERT_NE(engine, nullptr);
  SessionOptions so;
  so.threads = 2;
  so.n_ctx = 128;
  auto session = Session::Create(engine, so);
  ASSERT_TRUE(session.ok());
  std::vector<float> got;
  ASSERT_TRUE((*session)->Decode(prompt, &got).ok());
  // The disk fails: the next step's misses fail the call, which names what it could not read.
  engine->expert_store()->reader().set_fault_for_testing(
      [](uint64_t, size_t) { return absl::DataLossError("injected: Input/output error"); });
  const int64_t v = engine->model()->hp().n_vocab;
  auto argmax = [&] {
    auto l = (*session)->logits();
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  };
  int32_t t = argmax();
  absl::Status failed = (*session)->Decode({&t, 1});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(failed.message().find("loading expert"), std::string::npos) << failed;
  EXPECT_EQ((*session)->n_past(), static_cast<int64_t>(prompt.size()));  // nothing appended
  // The disk recovers: the same step now gives the resident run's logits.
  engine->expert_store()->reader().set_fault_for_testing(nullptr);
  for (int i = 0; i < 4; ++i) {
    t = argmax();
    const absl::Status s = (*session)->Decode({&t, 1});
    ASSERT_TRUE(s.ok()) << s;
    got.insert(got.end(), (*session)->logits().begin(), (*session)->logits().end());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(static_cast<int64_t>(got.size()) % v, 0);
}

TEST(ExpertCacheEngineFaultTest, AModelFileChangedOnDiskIsReported) {
  const fs::path copy = fs::path(::testing::TempDir()) /
                        ("moe_expert_cache_changed_" + std::to_string(::getpid()) + ".gguf");
  fs::copy_file(Gguf("tiny-qwen2moe-q4_0"), copy, fs::copy_options::overwrite_existing);
  auto full = Load(copy.string(), 0, 1.0);
  const size_t slot = full->expert_store()->slot_bytes();
  auto engine = Load(copy.string(), 4 * slot, 0);
  ASSERT_NE(engine, nullptr);
  auto session = Session::Create(engine, {});
  ASSERT_TRUE(session.ok());
  const std::vector<int32_t> prompt = PromptOf("tiny-qwen2moe-q4_0");
  ASSERT_TRUE((*session)->Decode(prompt).ok());
  std::ofstream(copy, std::ios::binary | std::ios::app) << "appended";
  int32_t t = 5;
  absl::Status s = absl::OkStatus();
  for (int i = 0; i < 8 && s.ok(); ++i) s = (*session)->Decode({&t, 1});  // until a miss reads
  fs::remove(copy);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("changed on disk"), std::string::npos) << s;
}

// Checkpoints transformers wrote (F16 experts, one matrix each) serve the cache as they are.
TEST(ExpertCacheEngineHfTest, TransformersCheckpointsServeTheCacheAsTheyAre) {
  for (const char* name : {"olmoe", "mixtral", "qwen2_moe", "qwen3_moe"}) {
    SCOPED_TRACE(name);
    const std::string dir = std::string(MOE_TESTDATA_DIR) + "/hf/" + name;
    auto resident = Engine::Load(dir, {});
    ASSERT_TRUE(resident.ok()) << resident.status();
    const std::vector<int32_t> prompt = {1, 7, 3, 12, 5, 9, 2, 30};
    auto cached = Load(dir, 0, 0.5);
    ASSERT_NE(cached, nullptr);
    EXPECT_EQ(LogitsOf(cached, prompt, 4), LogitsOf(*resident, prompt, 4));
    EXPECT_GT(cached->expert_store()->cache().stats().misses, 0);
  }
}

}  // namespace
}  // namespace moe
