// Expert parallelism in the forward pass over an in-process world: every rank runs the same
// steps, each only its own experts, and the logits are the single process's bit for bit.
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lib/dist/expert_ranks.h"
#include "lib/dist/loopback_communicator.h"
#include "lib/import/model_loader.h"
#include "lib/model/forward.h"

namespace moe {
namespace {

std::shared_ptr<const Model> LoadModel(const std::string& name) {
  auto spec =
      LoadModelSpec(std::string(MOE_TESTDATA_DIR) + "/fixtures/" + name + "/" + name + ".gguf");
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

TEST(ExpertParallelTest, RanksRunningTheirOwnExpertsGiveTheSingleProcessLogits) {
  for (const char* name : {"tiny-qwen2moe-f32", "tiny-olmoe-q8_0", "tiny-llama-moe-q8_0"}) {
    SCOPED_TRACE(name);
    auto model = LoadModel(name);
    ASSERT_NE(model, nullptr);
    const HParams& h = model->hp();
    auto backend = CreateCpuBackend(1);
    Transformer single(model, backend.get());
    std::vector<float> want;
    Telemetry want_tel;
    ASSERT_TRUE(RunSteps(single, *model, &want, &want_tel).ok());

    std::vector<bool> routed(h.n_layer);
    for (int l = 0; l < h.n_layer; ++l) {
      routed[l] = model->layers()[l].parts.ffn == FeedForwardPart::kMixture;
    }
    for (int world_size : {2, 4}) {
      auto ranks = ExpertRanks::RoundRobin(h.n_layer, h.n_expert, world_size, routed);
      ASSERT_TRUE(ranks.ok());
      auto world = CreateLoopbackWorld(world_size);
      std::vector<std::vector<float>> got(world_size);
      std::vector<Telemetry> tel(world_size);
      std::vector<absl::Status> status(world_size);
      std::vector<std::thread> threads;
      for (int r = 0; r < world_size; ++r) {
        threads.emplace_back([&, r] {
          auto be = CreateCpuBackend(1);
          Transformer tf(model, be.get());
          tf.set_expert_parallel(world[r].get(), &*ranks);
          status[r] = RunSteps(tf, *model, &got[r], &tel[r]);
        });
      }
      for (auto& t : threads) t.join();
      for (int r = 0; r < world_size; ++r) {
        ASSERT_TRUE(status[r].ok()) << status[r];
        EXPECT_EQ(got[r], want) << "rank " << r << " of " << world_size;
        EXPECT_EQ(tel[r].expert_counts, want_tel.expert_counts) << "every choice counted once";
      }
      // Each rank read only its own experts' weights.
      for (int r = 0; r < world_size; ++r) {
        EXPECT_LT(tel[r].weight_bytes_read, want_tel.weight_bytes_read) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace moe
