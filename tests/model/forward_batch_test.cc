// Transformer::ForwardBatch: several sequences stepped together, each in its own (paged or
// contiguous) K/V, give every token the logits it gets when its sequence runs alone — bit for bit,
// on the fast quantized path too, whatever the chunking and the company.
#include <map>
#include <random>

#include "gtest/gtest.h"
#include "lib/kv/kv_block_pool.h"
#include "lib/kv/paged_kv_storage.h"
#include "lib/model/forward.h"
#include "lib/model/kv_cache_for.h"
#include "tests/model/reference_model.h"

namespace moe {
namespace {

using testing::MakeRandomModel;
using testing::RandomModelOptions;

struct Case {
  const char* name;
  RandomModelOptions o;
  bool quantize_activations;
  DType kv = DType::kF16;
};

std::vector<Case> Cases() {
  RandomModelOptions f32;
  RandomModelOptions q8;
  q8.arch = Arch::kQwen2Moe;
  q8.n_embd = 64, q8.n_head = 4, q8.n_head_kv = 2, q8.head_dim = 16, q8.n_expert = 9,
  q8.n_expert_used = 4, q8.n_ff_expert = 32, q8.n_ff_shared = 64, q8.dtype = DType::kQ8_0;
  RandomModelOptions q4 = q8;
  q4.arch = Arch::kLlama, q4.n_ff_shared = 0, q4.dtype = DType::kQ4_0, q4.seed = 5;
  RandomModelOptions bf16 = q8;  // float weights: on AVX-512, batches of 4+ rows take the GEMM
  bf16.arch = Arch::kOlmoe, bf16.n_ff_shared = 0, bf16.dtype = DType::kBF16, bf16.seed = 9;
  RandomModelOptions k2 = q8;  // the 2- and 3-bit K-quants: rows of 256-element super-blocks
  k2.n_embd = 256, k2.head_dim = 64, k2.n_ff_expert = 256, k2.n_ff_shared = 256,
  k2.dtype = DType::kQ2_K, k2.seed = 15;
  RandomModelOptions k3 = k2;
  k3.arch = Arch::kQwen3Moe, k3.n_ff_shared = 0, k3.dtype = DType::kQ3_K, k3.seed = 16;
  RandomModelOptions q8_kv = q8;  // a Q8_0 KV cache needs heads of a multiple of 32
  q8_kv.head_dim = 32, q8_kv.seed = 13;
  RandomModelOptions lfm2 = q8;  // short-convolution layers keep F32 rows beside an F16 cache
  lfm2.arch = Arch::kLfm2Moe, lfm2.n_layer = 3, lfm2.short_conv_layers = {0, 2};
  lfm2.n_ff_shared = 0, lfm2.selection_bias = true, lfm2.seed = 19;
  // Mamba-2 layers: paged, each 4-position block keeps the state after its last position.
  RandomModelOptions granite_h = q8;
  granite_h.arch = Arch::kGraniteHybrid, granite_h.n_layer = 3, granite_h.ssm_layers = {0, 2};
  granite_h.ssm_state = 16, granite_h.ssm_groups = 1, granite_h.residual_scale = 0.5f;
  granite_h.seed = 23;
  // Nemotron-H: layers of one part, the expert layers caching nothing; ungated relu^2 experts.
  RandomModelOptions nemotron = granite_h;
  nemotron.arch = Arch::kNemotronHMoe, nemotron.n_layer = 5, nemotron.layer_pattern = "ME*EM";
  nemotron.ssm_layers.clear(), nemotron.residual_scale = 1.f, nemotron.selection_bias = true;
  nemotron.seed = 29;
  // Qwen3.5-MoE: gated delta nets paged as Mamba-2's, gated attention with partial RoPE.
  RandomModelOptions qwen35 = granite_h;
  qwen35.arch = Arch::kQwen35Moe, qwen35.n_layer = 4, qwen35.ssm_layers = {0, 1, 3};
  qwen35.ssm_heads = 4, qwen35.ssm_groups = 2, qwen35.rope_dim = 8, qwen35.n_ff_shared = 64;
  qwen35.residual_scale = 1.f, qwen35.seed = 31;
  return {{"f32", f32, false},
          {"q8_fast", q8, true},
          {"q4_fast", q4, true},
          {"bf16", bf16, true},
          {"q2_k_fast", k2, true},
          {"q3_k_fast", k3, true},
          {"q8_0_kv", q8_kv, true, DType::kQ8_0},
          {"lfm2moe", lfm2, true},
          {"granitehybrid", granite_h, true},
          {"nemotron_h_moe", nemotron, true},
          {"qwen35moe", qwen35, true}};
}

class ForwardBatchTest : public ::testing::TestWithParam<Case> {};

// Each sequence alone: its prompt in one call, then one token at a time; the logits of every
// position, in order.
std::vector<float> Alone(Transformer& tf, const std::vector<int32_t>& tokens, int64_t prompt,
                         DType kv) {
  auto cache = KvCacheFor(tf.model(), 64, kv);
  EXPECT_TRUE(cache.ok());
  std::vector<float> all, step;
  EXPECT_TRUE(
      tf.Forward({tokens.data(), static_cast<size_t>(prompt)}, *cache, LogitsFor::kAll, &all).ok());
  for (size_t t = prompt; t < tokens.size(); ++t) {
    EXPECT_TRUE(tf.Forward({&tokens[t], 1}, *cache, LogitsFor::kLast, &step).ok());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

TEST_P(ForwardBatchTest, EveryTokenGetsItsLoneLogitsBitForBit) {
  const Case& c = GetParam();
  auto model = Model::Create(MakeRandomModel(c.o));
  ASSERT_TRUE(model.ok()) << model.status();
  const HParams& h = (*model)->hp();
  auto backend = CreateCpuBackend({2, c.quantize_activations});
  Transformer tf(*model, backend.get());

  // Four sequences of different lengths arriving at different steps.
  std::mt19937 rng(11);
  const std::vector<int64_t> lengths = {23, 9, 30, 14}, prompts = {7, 9, 3, 12};
  const std::vector<int> arrival = {0, 0, 2, 5};
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t len : lengths) {
    std::vector<int32_t> s(len);
    for (auto& t : s) t = static_cast<int32_t>(rng() % h.n_vocab);
    seqs.push_back(s);
  }
  std::vector<std::vector<float>> want;
  for (size_t i = 0; i < seqs.size(); ++i) {
    want.push_back(Alone(tf, seqs[i], prompts[i], c.kv));
  }

  // Batched: sequences 0 and 2 in a paged cache of 4-position blocks, 1 and 3 contiguous. Each
  // step takes up to 5 tokens of a sequence (prompts go in chunks), every token's logits asked.
  PagedKvShape shape{h.n_layer,
                     h.n_head_kv,
                     h.head_dim,
                     c.kv,
                     /*block_shift=*/2,
                     false,
                     (*model)->conv_widths(),
                     (*model)->conv_rows(),
                     (*model)->state_floats()};
  auto storage = PagedKvStorage::Create(shape, 32);
  ASSERT_TRUE(storage.ok());
  auto pool = KvBlockPool::Create(32, 4);
  ASSERT_TRUE(pool.ok());
  std::vector<PagedKvSequence> paged(2, PagedKvSequence(&*storage));
  std::vector<KvCache> contiguous;
  for (int i = 0; i < 2; ++i) {
    contiguous.push_back(*KvCacheFor(**model, 64, c.kv));
  }
  std::vector<KvSequence*> kv = {&paged[0], &contiguous[0], &paged[1], &contiguous[1]};
  std::vector<int64_t> done(seqs.size(), 0);
  std::vector<std::vector<float>> got(seqs.size());
  for (int step = 0;; ++step) {
    std::vector<SequenceChunk> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (step < arrival[i] || done[i] == lengths[i]) continue;
      const int64_t m = std::min<int64_t>(done[i] < prompts[i] ? 5 : 1, lengths[i] - done[i]);
      if (i % 2 == 0) {  // paged: room for the new positions first
        auto& blocks = paged[i / 2].blocks();
        while (kv[i]->capacity() < done[i] + m) blocks.push_back(*pool->Allocate());
      }
      batch.push_back(
          {{seqs[i].data() + done[i], static_cast<size_t>(m)}, done[i], kv[i], LogitsFor::kAll});
      who.push_back(i);
    }
    if (batch.empty()) {
      if (step > arrival.back()) break;
      continue;
    }
    std::vector<float> logits;
    ASSERT_TRUE(tf.ForwardBatch(batch, &logits).ok());
    size_t row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const size_t i = who[b], m = batch[b].tokens.size();
      got[i].insert(got[i].end(), logits.begin() + row * h.n_vocab,
                    logits.begin() + (row + m) * h.n_vocab);
      row += m;
      done[i] += static_cast<int64_t>(m);
    }
    ASSERT_EQ(row * h.n_vocab, logits.size());
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << "sequence " << i;
    size_t differ = 0;
    for (size_t j = 0; j < got[i].size(); ++j) differ += got[i][j] != want[i][j];
    EXPECT_EQ(differ, 0u) << c.name << ": sequence " << i << ", " << differ << " of "
                          << got[i].size() << " logits differ";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardBatchTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ForwardBatchTest, LastRowsOnlyAndErrors) {
  auto model = Model::Create(MakeRandomModel({}));
  ASSERT_TRUE(model.ok());
  const HParams& h = (*model)->hp();
  auto backend = CreateCpuBackend(1);
  Transformer tf(*model, backend.get());
  auto a = KvCache::Create(h.n_layer, 8, h.n_head_kv, h.head_dim, DType::kF32);
  auto b = KvCache::Create(h.n_layer, 8, h.n_head_kv, h.head_dim, DType::kF32);
  std::vector<int32_t> ta = {1, 2, 3}, tb = {4, 5};
  std::vector<float> logits;
  std::vector<SequenceChunk> batch = {{ta, 0, &*a, LogitsFor::kLast},
                                      {tb, 0, &*b, LogitsFor::kNone}};
  ASSERT_TRUE(tf.ForwardBatch(batch, &logits).ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>(h.n_vocab));  // one row: a's last token
  // A chunk past its cache's room, a missing cache, an empty chunk: errors naming the problem.
  std::vector<SequenceChunk> too_far = {{ta, 6, &*a, LogitsFor::kLast}};
  EXPECT_EQ(tf.ForwardBatch(too_far, &logits).code(), absl::StatusCode::kResourceExhausted);
  std::vector<SequenceChunk> no_kv = {{ta, 0, nullptr, LogitsFor::kLast}};
  EXPECT_EQ(tf.ForwardBatch(no_kv, &logits).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SequenceChunk> empty = {{{}, 0, &*a, LogitsFor::kLast}};
  EXPECT_EQ(tf.ForwardBatch(empty, &logits).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tf.ForwardBatch({}, &logits).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
