#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>

#include "gtest/gtest.h"
#include "lib/format/moe_reader.h"
#include "lib/format/moe_writer.h"
#include "lib/import/gguf_import.h"
#include "lib/import/model_loader.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/kv_cache_for.h"
#include "tests/model/reference_model.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(MOE_TESTDATA_DIR) + "/fixtures/" + name + "/" + name + ".gguf";
}

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() /
          ("moe_container_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  return testing::ReadArray<uint8_t>(path);
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), b.size());
}

std::vector<float> PromptLogits(ModelSpec spec) {
  auto model = Model::Create(std::move(spec));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto backend = CreateCpuBackend(1);
  Transformer tf(*model, backend.get());
  const HParams& h = (*model)->hp();
  auto cache = KvCacheFor(**model, 64, DType::kF32);
  std::vector<int32_t> tokens = {1, 2, 3, 100, 2000, 7};
  for (int32_t& t : tokens) t %= static_cast<int32_t>(h.n_vocab);  // the smaller vocabularies
  std::vector<float> logits;
  EXPECT_TRUE(tf.Forward(tokens, *cache, LogitsFor::kAll, &logits).ok());
  return logits;
}

class MoeContainerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeContainerTest, RoundTripKeepsEveryTensorAndTheSameLogits) {
  auto gguf = ImportGguf(Fixture(GetParam()));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  std::string path = TempPath(GetParam() + ".moe");
  ASSERT_TRUE(WriteMoeFile(*gguf, path).ok());
  auto moe = ReadMoeFile(path);
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_EQ(moe->arch, gguf->arch);
  EXPECT_EQ(moe->hp.n_expert, gguf->hp.n_expert);
  EXPECT_EQ(moe->hp.rope_style, gguf->hp.rope_style);
  EXPECT_EQ(moe->hp.norm_topk_prob, gguf->hp.norm_topk_prob);
  EXPECT_EQ(moe->tokenizer.tokens, gguf->tokenizer.tokens);
  EXPECT_EQ(moe->tokenizer.merges, gguf->tokenizer.merges);
  ASSERT_EQ(moe->tensors.size(), gguf->tensors.size());
  for (const TensorSpec& t : gguf->tensors) {
    const TensorSpec* u = moe->Find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dtype, t.dtype);
    EXPECT_EQ(u->shape, t.shape);
    EXPECT_EQ(u->expert, t.expert);
    ASSERT_EQ(u->data.size(), t.data.size());
    EXPECT_EQ(0, std::memcmp(u->data.data(), t.data.data(), t.data.size())) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(u->data.data()) % kTensorAlignment, 0u);
    if (t.expert >= 0 && u->name.find("ffn_gate.") != std::string::npos) {
      // Each expert group starts on a page of its own.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(u->data.data()) % kExpertAlignment, 0u) << t.name;
    }
  }
  EXPECT_EQ(PromptLogits(*std::move(moe)), PromptLogits(*std::move(gguf)));
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeContainerTest,
                         ::testing::Values("tiny-llama-moe-q8_0", "tiny-qwen2moe-q4_0",
                                           "tiny-olmoe-f32"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = isalnum(c) ? c : '_';
                           return s;
                         });

// A deferred tensor (a converter's, made as it is written) is made once, exactly where the
// carried one would have been written; a producer that fails ends the write with its error and
// the tensor's name, leaving no file behind, not even the temporary one.
TEST(MoeContainerDeferredTest, TensorsAreMadeOnceAsWrittenAndAFailureLeavesNoFile) {
  auto gguf = ImportGguf(Fixture("tiny-qwen2moe-q4_0"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const std::string carried = TempPath("carried.moe"), made = TempPath("made.moe");
  ASSERT_TRUE(WriteMoeFile(*gguf, carried).ok());
  ModelSpec deferred = *gguf;
  auto calls = std::make_shared<std::map<std::string, int>>();
  for (TensorSpec& t : deferred.tensors) {
    t.produce = [calls, name = t.name, from = t.data](absl::Span<uint8_t> out) {
      ++(*calls)[name];
      if (out.size() != from.size()) return absl::InternalError("wrong size asked for");
      std::memcpy(out.data(), from.data(), out.size());
      return absl::OkStatus();
    };
    t.data = {};
  }
  ASSERT_TRUE(ValidateModelSpec(deferred).ok());
  const absl::Status wrote = WriteMoeFile(deferred, made);
  ASSERT_TRUE(wrote.ok()) << wrote;
  EXPECT_EQ(ReadAll(made), ReadAll(carried));
  EXPECT_EQ(calls->size(), deferred.tensors.size());
  for (const auto& [name, n] : *calls) EXPECT_EQ(n, 1) << name;
  fs::remove(made);

  // Model::Create makes them itself.
  EXPECT_EQ(PromptLogits(deferred), PromptLogits(*gguf));

  TensorSpec* expert = nullptr;
  for (TensorSpec& t : deferred.tensors) {
    if (t.name == ExpertTensorName(1, 2, "ffn_down")) expert = &t;
  }
  ASSERT_NE(expert, nullptr);
  expert->produce = [](absl::Span<uint8_t>) { return absl::DataLossError("disk read error"); };
  const absl::Status failed = WriteMoeFile(deferred, made);
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(failed.message().find("disk read error"), std::string::npos) << failed;
  EXPECT_NE(failed.message().find(expert->name), std::string::npos) << failed;
  EXPECT_FALSE(fs::exists(made));
  EXPECT_FALSE(fs::exists(made + ".tmp"));
  const absl::Status materialized = MaterializeTensors(deferred);
  EXPECT_EQ(materialized.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(materialized.message().find(expert->name), std::string::npos) << materialized;
  fs::remove(carried);
}

// Progress is told after each tensor, up to the total of the tensors' bytes; returning false
// cancels the write, which leaves no file.
TEST(MoeContainerProgressTest, ToldAfterEachTensorAndCancellable) {
  auto gguf = ImportGguf(Fixture("tiny-qwen2moe-q4_0"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  uint64_t bytes = 0;
  for (const TensorSpec& t : gguf->tensors) bytes += t.byte_size();
  const std::string path = TempPath("progress.moe");
  std::vector<uint64_t> seen;
  const absl::Status wrote = WriteMoeFile(*gguf, path, [&](uint64_t written, uint64_t total) {
    EXPECT_EQ(total, bytes);
    seen.push_back(written);
    return true;
  });
  ASSERT_TRUE(wrote.ok()) << wrote;
  ASSERT_EQ(seen.size(), gguf->tensors.size());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.back(), bytes);
  fs::remove(path);

  int calls = 0;
  const absl::Status cancelled =
      WriteMoeFile(*gguf, path, [&](uint64_t, uint64_t) { return ++calls < 3; });
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled) << cancelled;
  EXPECT_EQ(calls, 3);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

class MoeCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gguf = ImportGguf(Fixture("tiny-qwen2moe-q4_0"));
    ASSERT_TRUE(gguf.ok());
    good_ = TempPath("good.moe");
    ASSERT_TRUE(WriteMoeFile(*gguf, good_).ok());
    bytes_ = ReadAll(good_);
  }
  void TearDown() override {
    fs::remove(good_);
    fs::remove(TempPath("bad.moe"));
  }
  absl::Status Load(const std::vector<uint8_t>& b) {
    WriteAll(TempPath("bad.moe"), b);
    return LoadModelSpec(TempPath("bad.moe")).status();
  }
  std::string good_;
  std::vector<uint8_t> bytes_;
};

// Qwen3-VL-MoE's multimodal RoPE sections (appended to the header's hyper-parameters) survive the
// container, and so do the logits they shape.
TEST(MoeContainerSectionsTest, MultimodalRopeSectionsRoundTrip) {
  auto spec = ImportGguf(std::string(MOE_TESTDATA_DIR) +
                         "/fixtures-v2/tiny-qwen3moe-f32/tiny-qwen3moe-f32.gguf");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->arch = Arch::kQwen3VlMoe;
  spec->hp.rope_sections = {6, 4, 4, 0};  // 16 pairs: 13 and 14 keep angle 0 for text
  const std::string path = TempPath("sections.moe");
  ASSERT_TRUE(WriteMoeFile(*spec, path).ok());
  auto back = ReadMoeFile(path);
  fs::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->arch, Arch::kQwen3VlMoe);
  EXPECT_EQ(back->hp.rope_sections, spec->hp.rope_sections);
  EXPECT_TRUE(back->hp == spec->hp);
  const std::vector<float> want = PromptLogits(*spec);
  EXPECT_EQ(PromptLogits(*std::move(back)), want);
  spec->arch = Arch::kQwen3Moe;
  spec->hp.rope_sections = {};
  EXPECT_NE(PromptLogits(*std::move(spec)), want);  // the sections change the result
}

TEST_F(MoeCorruptionTest, TruncatedFilesAreErrorsThatSaySo) {
  for (size_t cut : {size_t{0}, size_t{3}, size_t{11}, size_t{100}, size_t{5000}, bytes_.size() / 2,
                     bytes_.size() - 1}) {
    auto s = Load({bytes_.begin(), bytes_.begin() + cut});
    // However short the cut, the file is a damaged model, not a file of another kind.
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "cut at " << cut << ": " << s;
  }
  auto s = Load({bytes_.begin(), bytes_.end() - 4096});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
}

TEST_F(MoeCorruptionTest, RandomHeaderDamageNeverCrashes) {
  uint32_t header_size;
  std::memcpy(&header_size, bytes_.data(), 4);
  std::mt19937 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> b = bytes_;
    for (int k = 0; k < 4; ++k) b[4 + rng() % header_size] ^= static_cast<uint8_t>(1 + rng() % 255);
    auto spec = [&] {
      WriteAll(TempPath("bad.moe"), b);
      return LoadModelSpec(TempPath("bad.moe"));
    }();
    if (!spec.ok()) {
      ++rejected;
      continue;
    }
    // Damage the verifier cannot see (a changed float, a token string) may load; it must still
    // run without touching memory outside the file.
    auto model = Model::Create(*std::move(spec));
    if (!model.ok()) ++rejected;
  }
  EXPECT_GT(rejected, 0);
}

// Dimensions each within bounds whose product passes 2^50 elements (2^35 x 2^32) are damage the
// reader names, before anything multiplies them out.
TEST_F(MoeCorruptionTest, ShapesWhoseElementCountOverflowsAreRejected) {
  auto spec = ReadMoeFile(good_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::vector<int64_t>& shape = spec->tensors[0].shape;
  ASSERT_EQ(shape.size(), 2u);
  uint32_t header_size;
  std::memcpy(&header_size, bytes_.data(), 4);
  const auto* want = reinterpret_cast<const uint8_t*>(shape.data());
  const auto at = std::search(bytes_.begin(), bytes_.begin() + 4 + header_size, want,
                              want + 2 * sizeof(int64_t));
  ASSERT_NE(at, bytes_.begin() + 4 + header_size);
  std::vector<uint8_t> b = bytes_;
  const int64_t big[] = {int64_t{1} << 35, int64_t{1} << 32};
  std::memcpy(b.data() + (at - bytes_.begin()), big, sizeof(big));
  auto s = Load(b);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("2^50 elements"), std::string::npos) << s;
}

// The classes moe_c.h documents for moe_model_load: missing (NotFound), a directory that is no
// checkpoint (InvalidArgument), a file of another kind (Unimplemented), a damaged or cut file of
// our kinds (DataLoss).
TEST_F(MoeCorruptionTest, WrongFileKindsAreClearErrors) {
  EXPECT_EQ(LoadModelSpec("/nonexistent.moe").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadModelSpec(::testing::TempDir()).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', '\n'};
  auto s = Load(text);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("not a model file"), std::string::npos) << s;
  std::mt19937 rng(5);
  std::vector<uint8_t> noise(4096);
  for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
  EXPECT_EQ(Load(noise).code(), absl::StatusCode::kUnimplemented);
  for (size_t cut = 0; cut < 4; ++cut) {  // a GGUF cut inside its magic
    const std::vector<uint8_t> gguf = {'G', 'G', 'U', 'F'};
    s = Load({gguf.begin(), gguf.begin() + cut});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << cut << ": " << s;
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  }
  for (size_t cut : {4, 8, 9, 11}) {  // a .moe cut before its identifier ends
    s = Load({bytes_.begin(), bytes_.begin() + cut});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << cut << ": " << s;
  }
}

// ERNIE-4.5's interleaved expert layers (moe_layer_step, appended to the header) survive the
// container: the same dense and expert layers, the same logits; another step is another model.
TEST(MoeContainerLayerStepTest, InterleavedExpertLayersRoundTrip) {
  testing::RandomModelOptions o;
  o.arch = Arch::kErnie45Moe;
  o.n_layer = 4, o.n_layer_dense = 1, o.n_ff_dense = 64, o.moe_layer_step = 2;
  o.selection_bias = true;
  ModelSpec spec = testing::MakeRandomModel(o);
  const std::string path = TempPath("layer_step.moe");
  ASSERT_TRUE(WriteMoeFile(spec, path).ok());
  auto back = ReadMoeFile(path);
  fs::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->arch, Arch::kErnie45Moe);
  EXPECT_EQ(back->hp.moe_layer_step, 2);
  EXPECT_TRUE(back->hp == spec.hp);
  EXPECT_EQ(PromptLogits(*std::move(back)), PromptLogits(std::move(spec)));
  // Read with experts in every layer, the file's dense layers 1 and 2 lack experts: refused.
  ModelSpec every = testing::MakeRandomModel(o);
  every.hp.moe_layer_step = 1;
  auto model = Model::Create(std::move(every));
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("blk.2.ffn_gate_inp"), std::string::npos)
      << model.status();
}

// Granite's multipliers (appended to the header) survive the container with the logits they
// shape; without them the logits differ.
TEST(MoeContainerMultipliersTest, GraniteMultipliersRoundTrip) {
  testing::RandomModelOptions o;
  o.arch = Arch::kGraniteMoe;
  o.embedding_scale = 12.f, o.residual_scale = 0.22f, o.logit_scale = 6.f;
  o.attention_scale = 0.125f;
  ModelSpec spec = testing::MakeRandomModel(o);
  const std::string path = TempPath("granite.moe");
  ASSERT_TRUE(WriteMoeFile(spec, path).ok());
  auto back = ReadMoeFile(path);
  fs::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->hp.embedding_scale, 12.f);
  EXPECT_EQ(back->hp.residual_scale, 0.22f);
  EXPECT_EQ(back->hp.logit_scale, 6.f);
  EXPECT_TRUE(back->hp == spec.hp);
  const std::vector<float> want = PromptLogits(spec);
  EXPECT_EQ(PromptLogits(*std::move(back)), want);
  spec.hp.embedding_scale = spec.hp.residual_scale = spec.hp.logit_scale = 1.f;
  EXPECT_NE(PromptLogits(std::move(spec)), want);
}

// Llama 4's attention and routing (appended to the header) survive the container with the
// logits they shape: chunks, NoPE layers with their query temperature, the unweighted QK-norm
// and the weighted expert inputs; with any of them off the logits differ.
TEST(MoeContainerLlama4Test, ChunksNopeAndWeightedInputsRoundTrip) {
  testing::RandomModelOptions o;
  o.arch = Arch::kLlama4;
  o.n_layer = 4, o.n_expert_used = 1, o.n_ff_shared = 40;
  o.attention_chunk = 3, o.temperature_floor = 2;
  ModelSpec spec = testing::MakeRandomModel(o);
  const std::string path = TempPath("llama4.moe");
  ASSERT_TRUE(WriteMoeFile(spec, path).ok());
  auto back = ReadMoeFile(path);
  fs::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->hp.window_chunked);
  EXPECT_EQ(back->hp.sliding_window, 3);
  EXPECT_EQ(back->hp.nope_period, 4);
  EXPECT_EQ(back->hp.attn_temp_floor, 2);
  EXPECT_EQ(back->hp.qk_norm, QkNorm::kPerHeadUnweighted);
  EXPECT_TRUE(back->hp.expert_input_weighted);
  EXPECT_TRUE(back->hp == spec.hp);
  const std::vector<float> want = PromptLogits(spec);
  EXPECT_EQ(PromptLogits(*std::move(back)), want);
  const std::vector<void (*)(HParams&)> changes = {
      [](HParams& h) { h.window_chunked = false; }, [](HParams& h) { h.nope_period = 0; },
      [](HParams& h) { h.attn_temp_scale = 0.f; }, [](HParams& h) { h.qk_norm = QkNorm::kNone; },
      [](HParams& h) { h.expert_input_weighted = false; }};
  for (size_t i = 0; i < changes.size(); ++i) {
    ModelSpec changed = testing::MakeRandomModel(o);
    changes[i](changed.hp);
    EXPECT_NE(PromptLogits(std::move(changed)), want) << "change " << i;
  }
}

// LFM2's convolution layers (their list and kernel length, appended to the header), Hunyuan's
// QK-norm after RoPE, Granite-4.0-H's Mamba-2 layers and Nemotron-H's layers of one part with
// ungated experts, and Qwen3.5-MoE's and Qwen3-Next's gated delta nets and gated attention
// survive the container
// with the logits they shape.
TEST(MoeContainerTest, ConvolutionAndMamba2LayersAndQkNormAfterRopeRoundTrip) {
  testing::RandomModelOptions lfm2;
  lfm2.arch = Arch::kLfm2Moe;
  lfm2.n_layer = 3, lfm2.short_conv_layers = {0, 2}, lfm2.short_conv_kernel = 4;
  lfm2.selection_bias = true;
  testing::RandomModelOptions hunyuan;
  hunyuan.arch = Arch::kHunyuanMoe;
  hunyuan.n_ff_shared = 40;
  testing::RandomModelOptions granite_h;
  granite_h.arch = Arch::kGraniteHybrid;
  granite_h.n_layer = 3, granite_h.ssm_layers = {0, 1}, granite_h.n_ff_shared = 40;
  granite_h.ssm_conv_kernel = 3;
  testing::RandomModelOptions nemotron;
  nemotron.arch = Arch::kNemotronHMoe;
  nemotron.n_layer = 4, nemotron.layer_pattern = "M*EE", nemotron.n_ff_shared = 40;
  nemotron.selection_bias = true;
  testing::RandomModelOptions nemotron_super = nemotron;  // latent experts
  nemotron_super.moe_latent = 16;
  testing::RandomModelOptions qwen35;
  qwen35.arch = Arch::kQwen35Moe;
  qwen35.n_layer = 3, qwen35.ssm_layers = {0, 2}, qwen35.n_ff_shared = 40, qwen35.rope_dim = 6;
  testing::RandomModelOptions qwen3next = qwen35;
  qwen3next.arch = Arch::kQwen3Next, qwen3next.ssm_heads = 4, qwen3next.ssm_groups = 2;
  for (const testing::RandomModelOptions& o :
       {lfm2, hunyuan, granite_h, nemotron, nemotron_super, qwen35, qwen3next}) {
    ModelSpec spec = testing::MakeRandomModel(o);
    const std::string path = TempPath("roundtrip.moe");
    ASSERT_TRUE(WriteMoeFile(spec, path).ok());
    auto back = ReadMoeFile(path);
    fs::remove(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->hp.short_conv_layers, o.short_conv_layers);
    if (o.layer_pattern.empty()) {
      EXPECT_EQ(back->hp.ssm_layers, o.ssm_layers);
      EXPECT_EQ(back->hp.ssm_conv_kernel, o.ssm_layers.empty() ? 0 : o.ssm_conv_kernel);
    } else {  // Nemotron-H's layers of one part, its Mamba-2 layers named by the pattern
      EXPECT_EQ(back->hp.ssm_layers, (std::vector<int64_t>{0}));
      EXPECT_EQ(back->hp.mixer_only_layers, (std::vector<int64_t>{0, 1}));
      EXPECT_EQ(back->hp.ffn_only_layers, (std::vector<int64_t>{2, 3}));
      EXPECT_TRUE(back->hp.relu_squared_ffn);
      EXPECT_EQ(back->hp.moe_latent_dim, o.moe_latent);
    }
    const bool delta_nets = o.arch == Arch::kQwen35Moe || o.arch == Arch::kQwen3Next;
    EXPECT_EQ(back->hp.attention_output_gate, delta_nets);
    EXPECT_EQ(back->hp.ssm_grouped_heads, o.arch == Arch::kQwen3Next);
    EXPECT_TRUE(back->hp == spec.hp);
    const std::vector<float> want = PromptLogits(spec);
    EXPECT_EQ(PromptLogits(*std::move(back)), want);
  }
}

}  // namespace
}  // namespace moe
