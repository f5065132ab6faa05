// Expert parallelism in the forward pass over an in-process world: every rank runs the same
// steps, each only its own experts, and the logits are the single process's bit for bit.
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lib/dist/expert_ranks.h"
#include "lib/dist/loopback_communicator.h"
#include "lib/format/moe_writer.h"
#include "lib/import/model_loader.h"
#include "lib/model/forward.h"
#include "lib/moe/routing_profile.h"
#include "tests/support/fixture_dirs.h"

namespace moe {
namespace {

std::shared_ptr<const Model> LoadModel(const std::string& name) {
  auto spec = LoadModelSpec(testing::FixtureGguf(testing::FixtureDir(name)));
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto model = Model::Create(*std::move(spec));
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// A prompt, then tokens one at a time: every step's logits, and the expert counts.
absl::Status RunSteps(Transformer& tf, const Model& model, std::vector<float>* all_logits,
                      Telemetry* tel) {
  const HParams& h = model.hp();
  auto cache =
      KvCache::Create(h.n_layer, 64, h.n_head_kv, h.head_dim, DType::kF32, h.values_in_keys());
  if (!cache.ok()) return cache.status();
  std::vector<float> logits;
  const std::vector<int32_t> prompt = {1, 17, 99, 4, 250, 31, 8, 77, 12, 5, 600};
  if (absl::Status s = tf.Forward(prompt, *cache, LogitsFor::kAll, &logits, tel); !s.ok()) {
    return s;
  }
  all_logits->insert(all_logits->end(), logits.begin(), logits.end());
  for (int32_t token : {42, 7, 1000}) {
    if (absl::Status s = tf.Forward({&token, 1}, *cache, LogitsFor::kLast, &logits, tel); !s.ok()) {
      return s;
    }
    all_logits->insert(all_logits->end(), logits.begin(), logits.end());
  }
  return absl::OkStatus();
}

// RunSteps on a loopback world of one rank per model (models[r]: rank r's), each on its own
// thread with its own backend.
struct RankRuns {
  std::vector<std::vector<float>> logits;
  std::vector<Telemetry> tel;
  std::vector<absl::Status> status;
};
RankRuns RunOnRanks(const std::vector<std::shared_ptr<const Model>>& models,
                    const ExpertRanks& ranks) {
  const int n = static_cast<int>(models.size());
  auto world = CreateLoopbackWorld(n);
  RankRuns runs{std::vector<std::vector<float>>(n), std::vector<Telemetry>(n),
                std::vector<absl::Status>(n)};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto backend = CreateCpuBackend(1);
      Transformer tf(models[r], backend.get());
      tf.set_expert_parallel(world[r].get(), &ranks);
      runs.status[r] = RunSteps(tf, *models[r], &runs.logits[r], &runs.tel[r]);
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

// RunSteps in one process holding every expert: what the ranks must reproduce.
struct SingleRun {
  std::vector<float> logits;
  Telemetry tel;
};
SingleRun RunAlone(std::shared_ptr<const Model> model) {
  auto backend = CreateCpuBackend(1);
  Transformer single(model, backend.get());
  SingleRun run;
  EXPECT_TRUE(RunSteps(single, *model, &run.logits, &run.tel).ok());
  return run;
}

// Each rank's model holding only its experts (ExpertRanks::KeepOwnExperts).
std::vector<std::shared_ptr<const Model>> LoadShares(const std::string& path,
                                                     const ExpertRanks& ranks) {
  std::vector<std::shared_ptr<const Model>> local(ranks.world());
  for (int r = 0; r < ranks.world(); ++r) {
    auto spec = LoadModelSpec(path);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return {};
    EXPECT_TRUE(ranks.KeepOwnExperts(r, &*spec).ok());
    auto model = Model::Create(*std::move(spec));
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return {};
    local[r] = *model;
  }
  return local;
}

TEST(ExpertParallelTest, RanksRunningTheirOwnExpertsGiveTheSingleProcessLogits) {
  // The newer families too: expert biases and MXFP4 (gpt-oss), leading dense layers, shared
  // experts and group routing over latent attention (deepseek2), glm4moe's sigmoid routing.
  for (const char* name :
       {"tiny-qwen2moe-f32", "tiny-olmoe-q8_0", "tiny-llama-moe-q8_0", "tiny-gptoss-mxfp4",
        "tiny-deepseek3-q8_0", "tiny-deepseek2lite-f32", "tiny-glm4moe-f32"}) {
    SCOPED_TRACE(name);
    auto model = LoadModel(name);
    ASSERT_NE(model, nullptr);
    const HParams& h = model->hp();
    const auto [want, want_tel] = RunAlone(model);

    std::vector<bool> routed(h.n_layer);
    for (int l = 0; l < h.n_layer; ++l) {
      routed[l] = model->layers()[l].parts.ffn == FeedForwardPart::kMixture;
    }
    for (int world_size : {2, 4}) {
      auto ranks = ExpertRanks::RoundRobin(h.n_layer, h.n_expert, world_size, routed);
      ASSERT_TRUE(ranks.ok());
      const RankRuns runs =
          RunOnRanks(std::vector<std::shared_ptr<const Model>>(world_size, model), *ranks);
      for (int r = 0; r < world_size; ++r) {
        ASSERT_TRUE(runs.status[r].ok()) << runs.status[r];
        EXPECT_EQ(runs.logits[r], want) << "rank " << r << " of " << world_size;
        EXPECT_EQ(runs.tel[r].expert_counts, want_tel.expert_counts) << "every choice counted once";
        // Each rank read only its own experts' weights.
        EXPECT_LT(runs.tel[r].weight_bytes_read, want_tel.weight_bytes_read) << "rank " << r;
      }
    }
  }
}

// Each rank loads only its own experts (ExpertRanks::KeepOwnExperts): same logits, a share of
// the expert bytes each; a rank-local model run without its peers is an error, not a crash.
TEST(ExpertParallelTest, RanksLoadingOnlyTheirExpertsGiveTheSameLogits) {
  const std::string path =
      std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-olmoe-q8_0/tiny-olmoe-q8_0.gguf";
  auto full = LoadModel("tiny-olmoe-q8_0");
  ASSERT_NE(full, nullptr);
  const HParams& h = full->hp();
  const auto [want, want_tel] = RunAlone(full);
  std::vector<bool> routed(h.n_layer, true);
  const int world_size = 4;
  auto ranks = ExpertRanks::RoundRobin(h.n_layer, h.n_expert, world_size, routed);
  ASSERT_TRUE(ranks.ok());
  auto expert_bytes = [](const ModelSpec& spec) {
    size_t bytes = 0;
    for (const TensorSpec& t : spec.tensors) bytes += t.expert >= 0 ? t.byte_size() : 0;
    return bytes;
  };
  const auto local = LoadShares(path, *ranks);
  ASSERT_EQ(static_cast<int>(local.size()), world_size);
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(expert_bytes(local[r]->spec()) * world_size, expert_bytes(full->spec()))
        << "rank " << r << " holds its quarter";
    EXPECT_EQ(WriteMoeFile(local[r]->spec(), ::testing::TempDir() + "/never.moe").code(),
              absl::StatusCode::kInvalidArgument);
  }
  const RankRuns runs = RunOnRanks(local, *ranks);
  for (int r = 0; r < world_size; ++r) {
    ASSERT_TRUE(runs.status[r].ok()) << runs.status[r];
    EXPECT_EQ(runs.logits[r], want) << "rank " << r;
  }
  auto backend = CreateCpuBackend(1);
  Transformer alone(local[0], backend.get());
  std::vector<float> unused;
  Telemetry unused_tel;
  EXPECT_EQ(RunSteps(alone, *local[0], &unused, &unused_tel).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ranks->KeepOwnExperts(world_size, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// Replicas of the hottest experts (ExpertRanks::AddReplicas) split their tokens between ranks:
// the same logits, every choice counted once, on ranks holding only their experts.
TEST(ExpertParallelTest, ReplicasSplittingHotExpertsGiveTheSameLogits) {
  const std::string name = "tiny-qwen2moe-f32";
  auto full = LoadModel(name);
  ASSERT_NE(full, nullptr);
  const HParams& h = full->hp();
  const auto [want, want_tel] = RunAlone(full);
  // The routing the steps make, as a profile: its hottest experts get replicas.
  RoutingProfile profile{want_tel.expert_counts};
  std::vector<bool> routed(h.n_layer, true);
  for (int world_size : {2, 3}) {
    SCOPED_TRACE(world_size);
    auto ranks = ExpertRanks::Balanced(profile, world_size, routed);
    ASSERT_TRUE(ranks.ok());
    ASSERT_TRUE(ranks->AddReplicas(profile, 2).ok());
    const auto local = LoadShares(
        std::string(MOE_TESTDATA_DIR) + "/fixtures/" + name + "/" + name + ".gguf", *ranks);
    ASSERT_EQ(static_cast<int>(local.size()), world_size);
    const RankRuns runs = RunOnRanks(local, *ranks);
    for (int r = 0; r < world_size; ++r) {
      ASSERT_TRUE(runs.status[r].ok()) << runs.status[r];
      EXPECT_EQ(runs.logits[r], want) << "rank " << r;
      EXPECT_EQ(runs.tel[r].expert_counts, want_tel.expert_counts) << "every choice counted once";
    }
  }
}

}  // namespace
}  // namespace moe
