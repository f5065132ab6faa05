// Hugging Face checkpoint import: every architecture's names and shapes, logits against the
// plain-PyTorch reference (tests/data/hf, written by make_fixtures.py), dtype conversion, the
// .moe round trip, and one clear error per kind of broken checkpoint.
#include "lib/import/hf_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/format/moe_reader.h"
#include "lib/format/moe_writer.h"
#include "lib/import/hf_fp8.h"
#include "lib/import/model_loader.h"
#include "lib/import/safetensors_file.h"
#include "lib/import/tokenizer_loader.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/kv_cache_for.h"
#include "lib/model/model.h"
#include "lib/tokenizer/tokenizer.h"
#include "tests/hf/checkpoint_builder.h"
#include "tests/hf/deferred_conversion_check.h"
#include "tests/model/reference_model.h"
#include "tests/support/sentencepiece_tokenizer_json.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using ::moe::testing::ExpectDeferredConversionWritesTheSameFile;
using ::moe::testing::RawTensor;
using ::moe::testing::RefusalOf;
using ::moe::testing::TinyConfig;
using ::moe::testing::TinyTensors;
using ::moe::testing::WriteCheckpoint;
using ::testing::HasSubstr;

fs::path TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("moe_hf_test_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

fs::path FixtureDir(const std::string& name) {
  return fs::path(MOE_SOURCE_DIR) / "tests" / "data" / "hf" / name;
}

// ---------------------------------------------------------------------------------------------
// Names, shapes and hyper-parameters of each architecture.

class ArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchTest, ImportsNamesShapesAndHyperParameters) {
  const std::string arch = GetParam();
  const fs::path dir = TempDir(arch);
  nlohmann::json config = TinyConfig(arch);
  WriteCheckpoint(dir, config, TinyTensors(config, 7));
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const HParams& h = spec->hp;
  EXPECT_EQ(h.n_vocab, 40);
  EXPECT_EQ(h.n_embd, 32);
  EXPECT_EQ(h.n_layer, 2);
  EXPECT_EQ(h.n_head, 4);
  EXPECT_EQ(h.n_head_kv, 2);
  EXPECT_EQ(h.n_expert, 4);
  EXPECT_EQ(h.n_expert_used, 2);
  EXPECT_EQ(h.n_ff_expert, 16);
  EXPECT_EQ(h.rope_style, RopeStyle::kNeox);
  EXPECT_FALSE(h.tied_output);
  EXPECT_TRUE(spec->tokenizer.tokens.empty());

  auto shape_of = [&](const std::string& name) {
    const TensorSpec* t = spec->Find(name);
    return t ? t->shape : std::vector<int64_t>{-1};
  };
  const int64_t q_dim = arch == "Qwen3MoeForCausalLM" ? 64 : 32;
  EXPECT_EQ(shape_of("token_embd.weight"), (std::vector<int64_t>{40, 32}));
  EXPECT_EQ(shape_of("output.weight"), (std::vector<int64_t>{40, 32}));
  EXPECT_EQ(shape_of("blk.1.attn_q.weight"), (std::vector<int64_t>{q_dim, 32}));
  EXPECT_EQ(shape_of("blk.1.attn_k.weight"), (std::vector<int64_t>{q_dim / 2, 32}));
  EXPECT_EQ(shape_of("blk.1.attn_output.weight"), (std::vector<int64_t>{32, q_dim}));
  EXPECT_EQ(shape_of("blk.0.ffn_gate_inp.weight"), (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(shape_of("blk.1.ffn_gate.3.weight"), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(shape_of("blk.1.ffn_up.3.weight"), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(shape_of("blk.1.ffn_down.3.weight"), (std::vector<int64_t>{32, 16}));
  const TensorSpec* expert = spec->Find("blk.1.ffn_down.2.weight");
  ASSERT_NE(expert, nullptr);
  EXPECT_EQ(expert->layer, 1);
  EXPECT_EQ(expert->expert, 2);
  EXPECT_EQ(expert->dtype, DType::kF32);

  size_t per_layer = 2 /*norms*/ + 4 /*attn*/ + 1 /*router*/ + 4 * 3 /*experts*/;
  if (arch == "MixtralForCausalLM") {
    EXPECT_TRUE(h.norm_topk_prob);
    EXPECT_EQ(h.qk_norm, QkNorm::kNone);
    EXPECT_EQ(h.n_ctx_train, 128);  // sliding_window null: no bound
  } else if (arch == "Qwen2MoeForCausalLM") {
    EXPECT_FALSE(h.norm_topk_prob);
    EXPECT_TRUE(h.has_qkv_bias);
    EXPECT_EQ(h.n_ff_shared, 24);
    EXPECT_TRUE(h.shared_expert_gate);
    EXPECT_EQ(shape_of("blk.0.attn_q.bias"), (std::vector<int64_t>{32}));
    EXPECT_EQ(shape_of("blk.0.ffn_gate_inp_shexp.weight"), (std::vector<int64_t>{32}));
    EXPECT_EQ(shape_of("blk.0.ffn_down_shexp.weight"), (std::vector<int64_t>{32, 24}));
    per_layer += 3 + 4;
  } else if (arch == "OlmoeForCausalLM") {
    EXPECT_FALSE(h.norm_topk_prob);
    EXPECT_EQ(h.qk_norm, QkNorm::kFull);
    EXPECT_EQ(shape_of("blk.0.attn_q_norm.weight"), (std::vector<int64_t>{32}));
    EXPECT_EQ(shape_of("blk.0.attn_k_norm.weight"), (std::vector<int64_t>{16}));
    per_layer += 2;
  } else {
    EXPECT_TRUE(h.norm_topk_prob);
    EXPECT_EQ(h.qk_norm, QkNorm::kPerHead);
    EXPECT_EQ(h.head_dim, 16);
    EXPECT_EQ(shape_of("blk.0.attn_q_norm.weight"), (std::vector<int64_t>{16}));
    EXPECT_EQ(shape_of("blk.0.attn_k_norm.weight"), (std::vector<int64_t>{16}));
    per_layer += 2;
  }
  EXPECT_EQ(spec->tensors.size(), 3 + 2 * per_layer);
  EXPECT_TRUE(ValidateModelSpec(*spec).ok());
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, ArchTest,
                         ::testing::Values("MixtralForCausalLM", "Qwen2MoeForCausalLM",
                                           "OlmoeForCausalLM", "Qwen3MoeForCausalLM"),
                         [](const auto& info) { return info.param; });

TEST(HfImportTest, TiedEmbeddingsNeedNoLmHead) {
  const fs::path dir = TempDir("tied");
  nlohmann::json config = TinyConfig("Qwen3MoeForCausalLM");
  config["tie_word_embeddings"] = true;
  WriteCheckpoint(dir, config, TinyTensors(config, 3));
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->hp.tied_output);
  EXPECT_EQ(spec->Find("output.weight"), nullptr);
}

TEST(HfImportTest, SlidingWindowShorterThanContextBoundsIt) {
  const fs::path dir = TempDir("sliding");
  nlohmann::json config = TinyConfig("MixtralForCausalLM");
  config["sliding_window"] = 64;
  WriteCheckpoint(dir, config, TinyTensors(config, 3));
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.n_ctx_train, 64);
}

TEST(HfImportTest, LoadModelSpecAcceptsADirectory) {
  const fs::path dir = TempDir("loader");
  nlohmann::json config = TinyConfig("OlmoeForCausalLM");
  WriteCheckpoint(dir, config, TinyTensors(config, 5));
  auto spec = LoadModelSpec(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->arch, Arch::kOlmoe);
}

// The bundled model's SentencePiece tokenizer.model, taken when tokenizer.json is one the
// tokenizer library does not read, and padded to the embedding's vocabulary size.
TEST(HfImportTest, SentencePieceTokenizerModel) {
  const fs::path bundled = fs::path(MOE_SOURCE_DIR) / "models" / "tiny-brown-moe";
  for (int64_t vocab : {4000, 4010, 3990}) {
    SCOPED_TRACE(vocab);
    const fs::path dir = TempDir("spm_" + std::to_string(vocab));
    nlohmann::json config = TinyConfig("MixtralForCausalLM");
    config["vocab_size"] = vocab;
    WriteCheckpoint(dir, config, TinyTensors(config, 11));
    fs::copy_file(bundled / "tokenizer.model", dir / "tokenizer.model");
    fs::copy_file(bundled / "tokenizer_config.json", dir / "tokenizer_config.json");
    std::ofstream(dir / "tokenizer.json")
        << R"({"model": {"type": "Unigram", "vocab": []}, "pre_tokenizer": {"type": "Metaspace"}})";
    auto spec = ImportHfCheckpoint(dir.string());
    if (vocab < 4000) {
      EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
      EXPECT_THAT(std::string(spec.status().message()), HasSubstr("the tokenizer has 4000 tokens"));
      continue;
    }
    ASSERT_TRUE(spec.ok()) << spec.status();
    const TokenizerData& t = spec->tokenizer;
    EXPECT_EQ(t.model, "llama");
    ASSERT_EQ(static_cast<int64_t>(t.tokens.size()), vocab);
    EXPECT_EQ(t.tokens[1], "<s>");
    EXPECT_EQ(t.bos_id, 1);
    EXPECT_EQ(t.eos_id, 2);
    EXPECT_EQ(t.unk_id, 0);
    EXPECT_TRUE(t.add_bos);
    EXPECT_TRUE(t.add_space_prefix);
    EXPECT_EQ(t.token_types[3 + 0x41], static_cast<int32_t>(TokenType::kByte));  // <0x41>
    EXPECT_EQ(t.tokens[3 + 0x41], "<0x41>");
    EXPECT_THAT(t.chat_template, HasSubstr("messages"));
    if (vocab > 4000) {
      EXPECT_EQ(t.tokens[4005], "[PAD4005]");
      EXPECT_EQ(t.token_types[4005], static_cast<int32_t>(TokenType::kUnused));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Logits against the PyTorch reference of transformers' modeling code.

std::vector<float> ReadFloats(const fs::path& p) { return testing::ReadArray<float>(p); }

std::vector<int32_t> ReadIds(const fs::path& p) { return testing::ReadIntegers<int32_t>(p); }

std::vector<float> RunAll(const ModelSpec& spec_in, const std::vector<int32_t>& ids) {
  auto model = Model::Create(spec_in);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto backend = CreateCpuBackend(1);
  Transformer tf(*model, backend.get());
  auto cache = KvCacheFor(**model, 64, DType::kF32);
  EXPECT_TRUE(cache.ok());
  std::vector<float> logits;
  absl::Status s = tf.Forward(ids, *cache, LogitsFor::kAll, &logits);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// Largest |a - b| and the tolerance 1e-3 x max|reference|.
std::pair<double, double> Compare(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(want[i])));
  }
  return {err, 1e-3 * max_abs};
}

// A Mixtral-layout checkpoint in `dir` whose tokenizer is only a SentencePiece-style
// tokenizer.json written from the llama-spm GGUF vocabulary.
void WriteCheckpointWithSpmTokenizerJson(const fs::path& dir) {
  auto gguf =
      LoadTokenizerData(std::string(MOE_TESTDATA_DIR) + "/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  nlohmann::json config = TinyConfig("MixtralForCausalLM");
  config["vocab_size"] = static_cast<int64_t>(gguf->tokens.size());
  WriteCheckpoint(dir, config, TinyTensors(config, 5));
  std::ofstream(dir / "tokenizer.json")
      << testing::SentencePieceTokenizerJson(*gguf, testing::SentencePieceJsonForm::kNormalizer)
             .dump();
}

// A Mixtral-layout checkpoint whose tokenizer is only a SentencePiece-style tokenizer.json (no
// tokenizer.model, no tokenizer_config.json), written from the llama-spm GGUF vocabulary: it
// imports, tokenizes the llama fixture prompts into the ids llama.cpp made of them with that
// vocabulary, and gives the logits the GGUF vocabulary's tokenization gives.
TEST(HfImportTest, SentencePieceTokenizerJsonAloneImportsExactly) {
  const fs::path dir = TempDir("spm_tokenizer_json");
  ASSERT_NO_FATAL_FAILURE(WriteCheckpointWithSpmTokenizerJson(dir));
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->tokenizer.model, "llama");
  auto from_json = Tokenizer::Create(spec->tokenizer);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  const fs::path fixture = fs::path(MOE_TESTDATA_DIR) / "fixtures" / "tiny-llama-moe-f32";
  for (const char* prompt : {"p1", "p2"}) {
    SCOPED_TRACE(prompt);
    const std::string text =
        testing::ReadFileBytes(fixture / (std::string(prompt) + ".prompt.txt"));
    const std::vector<int32_t> want = ReadIds(fixture / (std::string(prompt) + ".tokens.txt"));
    EncodeOptions with_bos;
    with_bos.add_bos = true;
    const std::vector<int32_t> ids = (*from_json)->Encode(text, with_bos);
    EXPECT_EQ(ids, want);
    EXPECT_EQ(RunAll(*spec, ids), RunAll(*spec, want));
  }
}

// rope_scaling of type llama3 (Llama-3-based MoE merges): the per-pair divisors llama.cpp's
// converter writes as rope_freqs, here one pair in each of its three ranges; they turn the
// rotations, so the logits differ from the unscaled checkpoint's.
TEST(HfImportTest, Llama3RopeScalingBecomesRopeFreqs) {
  nlohmann::json config = TinyConfig("MixtralForCausalLM");  // head_dim 8: four pairs
  const fs::path plain_dir = TempDir("llama3_plain");
  WriteCheckpoint(plain_dir, config, TinyTensors(config, 5));
  config["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 2048}};
  const fs::path dir = TempDir("llama3");
  WriteCheckpoint(dir, config, TinyTensors(config, 5));
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const TensorSpec* t = spec->Find(std::string(kRopeFreqsTensor));
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape, std::vector<int64_t>{4});
  ASSERT_EQ(t->dtype, DType::kF32);
  std::vector<float> got(4);
  std::memcpy(got.data(), t->data.data(), got.size() * sizeof(float));
  // Wavelengths 2 pi 10000^(i / 4): 6.3 and 63 (below 2048 / 4: kept), 628 (between: the smooth
  // blend), 6283 (above 2048: divided by the factor).
  constexpr double kPi = 3.14159265358979323846;
  const double smooth = (2048 / (2 * kPi * 100) - 1) / (4 - 1);
  const std::vector<double> want = {1, 1, 1 / ((1 - smooth) / 8 + smooth), 8};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << i;
  auto plain = ImportHfCheckpoint(plain_dir.string());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->Find(std::string(kRopeFreqsTensor)), nullptr);
  const std::vector<int32_t> ids = {3, 17, 36, 0, 22, 22, 7, 31, 5, 30, 11};
  EXPECT_NE(RunAll(*spec, ids), RunAll(*plain, ids));
}

// generation_config.json's eos_token_id (one id or a list) names every token transformers stops
// at: each ends generation here too (GLM-4.5 lists <|user|> and <|observation|> beside its EOS),
// and a .moe file written from the checkpoint keeps them; ids past the vocabulary are dropped.
TEST(HfImportTest, GenerationConfigEosIdsAllEndGeneration) {
  const std::string vocab = std::string(MOE_TESTDATA_DIR) + "/tokenizer/ggml-vocab-llama-spm.gguf";
  auto gguf = LoadTokenizerData(vocab);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const int32_t n = static_cast<int32_t>(gguf->tokens.size());
  const fs::path dir = TempDir("generation_config_eos");
  nlohmann::json config = TinyConfig("MixtralForCausalLM");
  config["vocab_size"] = static_cast<int64_t>(n);
  WriteCheckpoint(dir, config, TinyTensors(config, 5));
  std::ofstream(dir / "tokenizer.json")
      << testing::SentencePieceTokenizerJson(*gguf, testing::SentencePieceJsonForm::kNormalizer)
             .dump();
  std::ofstream(dir / "generation_config.json")
      << nlohmann::json{{"eos_token_id", {2, 7, 9, n + 5}}}.dump();
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const fs::path moe = dir / "model.moe";
  ASSERT_TRUE(WriteMoeFile(*spec, moe.string()).ok());
  auto reread = ReadMoeFile(moe.string());
  ASSERT_TRUE(reread.ok()) << reread.status();
  for (const ModelSpec* s : {&*spec, &*reread}) {
    auto tokenizer = Tokenizer::Create(s->tokenizer);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(2));  // </s>, the EOS
    EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(7));
    EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(9));
    EXPECT_FALSE((*tokenizer)->IsEndOfGeneration(8));
  }
  // A single id is a list of one.
  std::ofstream(dir / "generation_config.json") << nlohmann::json{{"eos_token_id", 11}}.dump();
  auto single = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->tokenizer.eog_ids, std::vector<int32_t>{11});
  fs::remove_all(dir);
}

// Block-scaled FP8 (transformers' "fp8" quantization_config): every attention and expert matrix
// stored as E4M3 bytes beside a "_scale_inv" of one factor per 8x8 block (BF16 here), the
// router, norms, embeddings and head as they were. Imported with F32 weights asked for, it is
// the same model as the checkpoint holding those products as F32, tensor for tensor and logit for
// logit; by default the dequantized values are stored as BF16.
// An FP8 tensor `name` of `shape` (a matrix, or a stack of them) with random E4M3 values and BF16
// block factors (exact in BF16) into `fp8` (with its _scale_inv), and its exact values as F32
// into `exact`.
void AsBlockScaledFp8(const std::string& name, const std::vector<int64_t>& shape, int64_t block,
                      std::mt19937& rng, std::map<std::string, RawTensor>* fp8,
                      std::map<std::string, RawTensor>* exact) {
  const size_t dims = shape.size();
  const int64_t rows = shape[dims - 2], cols = shape[dims - 1];
  int64_t matrices = 1;
  for (size_t i = 0; i + 2 < dims; ++i) matrices *= shape[i];
  const int64_t br = (rows + block - 1) / block, bc = (cols + block - 1) / block;
  std::vector<int64_t> scale_shape(shape.begin(), shape.end() - 2);
  scale_shape.push_back(br);
  scale_shape.push_back(bc);
  RawTensor q{"F8_E4M3", shape, std::vector<uint8_t>(matrices * rows * cols)};
  RawTensor scale{"BF16", scale_shape, std::vector<uint8_t>(2 * matrices * br * bc)};
  std::vector<float> scales(matrices * br * bc);
  for (size_t i = 0; i < scales.size(); ++i) {
    // A BF16 factor: a power of two times 1, 1.5 or 1.25, so it is exact in BF16.
    const float f = std::ldexp(1.0f + 0.25f * static_cast<float>(rng() % 3), -6 - int(rng() % 4));
    scales[i] = f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint16_t bf16 = static_cast<uint16_t>(bits >> 16);
    std::memcpy(scale.bytes.data() + 2 * i, &bf16, 2);
  }
  RawTensor f32{"F32", shape, std::vector<uint8_t>(4 * matrices * rows * cols)};
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t byte;
        do byte = static_cast<uint8_t>(rng());
        while ((byte & 0x7f) == 0x7f);
        const int64_t at = (m * rows + r) * cols + c;
        q.bytes[at] = byte;
        const float v = E4m3ToFloat(byte) * scales[(m * br + r / block) * bc + c / block];
        std::memcpy(f32.bytes.data() + 4 * at, &v, 4);
      }
    }
  }
  (*fp8)[name] = q;
  (*fp8)[name + "_scale_inv"] = scale;
  (*exact)[name] = f32;
}

TEST(HfImportTest, BlockScaledFp8CheckpointsAreDequantized) {
  // E4M3 values written out (OCP fn: bias 7, subnormals below 2^-6, S.1111.111 NaN).
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0xFE), -448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(E4m3ToFloat(0x08), 0.015625f);     // 2^-6, the smallest normal
  EXPECT_EQ(E4m3ToFloat(0x44), 3.0f);
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7F)));

  nlohmann::json config = TinyConfig("Qwen3MoeForCausalLM");
  const std::map<std::string, RawTensor> plain = TinyTensors(config, 11);
  std::map<std::string, RawTensor> fp8 = plain, exact = plain;
  std::mt19937 rng(3);
  const int64_t block = 8;
  int converted = 0;
  for (const auto& [name, t] : plain) {
    const bool matrix = t.shape.size() == 2 && name.find("embed") == std::string::npos &&
                        name.find("lm_head") == std::string::npos &&
                        name.find("mlp.gate.weight") == std::string::npos;
    if (!matrix) continue;
    AsBlockScaledFp8(name, t.shape, block, rng, &fp8, &exact);
    ++converted;
  }
  ASSERT_GT(converted, 8);
  nlohmann::json quantized = config;
  quantized["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {block, block}}};
  const fs::path fp8_dir = TempDir("fp8"), exact_dir = TempDir("fp8_exact");
  WriteCheckpoint(fp8_dir, quantized, fp8);
  WriteCheckpoint(exact_dir, config, exact);

  // Dequantized when written (moe-convert), the same files as when imported.
  EXPECT_GT(ExpectDeferredConversionWritesTheSameFile(fp8_dir, std::nullopt), 8);
  EXPECT_GT(ExpectDeferredConversionWritesTheSameFile(fp8_dir, DType::kF32), 8);

  auto from_fp8 = ImportHfCheckpoint(fp8_dir.string(), DType::kF32);
  ASSERT_TRUE(from_fp8.ok()) << from_fp8.status();
  auto want = ImportHfCheckpoint(exact_dir.string());
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(from_fp8->tensors.size(), want->tensors.size());
  for (const TensorSpec& t : want->tensors) {
    const TensorSpec* got = from_fp8->Find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    EXPECT_EQ(got->dtype, DType::kF32) << t.name;
    EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), got->data.begin(), got->data.end()))
        << t.name;
  }
  const std::vector<int32_t> ids = {1, 5, 9, 2, 33, 17, 8, 4};
  EXPECT_EQ(RunAll(*from_fp8, ids), RunAll(*want, ids));

  auto bf16 = ImportHfCheckpoint(fp8_dir.string());
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->Find("blk.0.attn_q.weight")->dtype, DType::kBF16);
  const auto [err, tol] = Compare(RunAll(*bf16, ids), RunAll(*want, ids));
  EXPECT_LT(err, 30 * tol) << "BF16 keeps 8 bits of each product";

  // Another quantization method, or FP8 without block sizes, is refused naming it.
  quantized["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  WriteCheckpoint(fp8_dir, quantized, fp8);
  auto gptq = ImportHfCheckpoint(fp8_dir.string());
  ASSERT_FALSE(gptq.ok());
  EXPECT_EQ(gptq.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(gptq.status().message()), HasSubstr("'gptq'"));
  // A method that is not even a string is refused the same way, not thrown over.
  quantized["quantization_config"] = {{"quant_method", 5}};
  WriteCheckpoint(fp8_dir, quantized, fp8);
  EXPECT_EQ(ImportHfCheckpoint(fp8_dir.string()).status().code(), absl::StatusCode::kUnimplemented);
  // A scale tensor of the wrong shape is an error naming both tensors.
  quantized["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {4, 4}}};
  WriteCheckpoint(fp8_dir, quantized, fp8);
  auto wrong = ImportHfCheckpoint(fp8_dir.string());
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("_scale_inv"));
  fs::remove_all(fp8_dir);
  fs::remove_all(exact_dir);
}

// ---------------------------------------------------------------------------------------------
// Families whose checkpoints are written here from a random model (tests/model/reference_model)
// in transformers' layout, and whose import must then run as the naive reference computes it.

// The random model's tensor `name` as a checkpoint's F32 tensor, of its shape or `shape`.
RawTensor RawOf(const ModelSpec& m, const std::string& name, std::vector<int64_t> shape = {}) {
  const TensorSpec* t = m.Find(name);
  EXPECT_NE(t, nullptr) << name;
  RawTensor r;
  if (t == nullptr) return r;
  r.shape = shape.empty() ? t->shape : std::move(shape);
  r.bytes.assign(t->data.begin(), t->data.end());
  return r;
}

// Embeddings, final norm and, per layer, both norms and llama's attention, under transformers'
// names.
std::map<std::string, RawTensor> LlamaLayoutTensors(const ModelSpec& m) {
  std::map<std::string, RawTensor> t;
  t["model.embed_tokens.weight"] = RawOf(m, "token_embd.weight");
  t["model.norm.weight"] = RawOf(m, "output_norm.weight");
  for (int l = 0; l < m.hp.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t[p + "input_layernorm.weight"] = RawOf(m, LayerTensorName(l, "attn_norm"));
    t[p + "post_attention_layernorm.weight"] = RawOf(m, LayerTensorName(l, "ffn_norm"));
    for (const char* x : {"q", "k", "v"}) {
      t[absl::StrCat(p, "self_attn.", x, "_proj.weight")] =
          RawOf(m, LayerTensorName(l, absl::StrCat("attn_", x)));
    }
    t[p + "self_attn.o_proj.weight"] = RawOf(m, LayerTensorName(l, "attn_output"));
  }
  return t;
}

// config.json's keys of the random model's shape.
nlohmann::json RandomModelConfig(const HParams& h, const char* arch, const char* model_type) {
  return {{"architectures", {arch}},
          {"model_type", model_type},
          {"vocab_size", h.n_vocab},
          {"hidden_size", h.n_embd},
          {"num_hidden_layers", h.n_layer},
          {"num_attention_heads", h.n_head},
          {"num_key_value_heads", h.n_head_kv},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"torch_dtype", "float32"}};
}

// Imports the checkpoint and compares its logits with the naive reference's on `random`.
void ExpectImportRunsAsReference(const fs::path& dir, const ModelSpec& random, Arch arch) {
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->arch, arch);
  const HParams& got = spec->hp;
  const HParams& want = random.hp;
  EXPECT_EQ(got.tied_output, want.tied_output);
  EXPECT_EQ(got.n_layer_dense, want.n_layer_dense);
  EXPECT_EQ(got.moe_layer_step, want.moe_layer_step);
  EXPECT_EQ(got.n_ff_shared, want.n_ff_shared);
  EXPECT_EQ(got.has_selection_bias, want.has_selection_bias);
  EXPECT_EQ(got.embedding_scale, want.embedding_scale);
  EXPECT_EQ(got.residual_scale, want.residual_scale);
  EXPECT_EQ(got.logit_scale, want.logit_scale);
  EXPECT_EQ(got.kq_scale, want.kq_scale);
  const std::vector<int32_t> ids = {3, 17, 96, 0, 42, 42, 7, 81, 5, 60, 11};
  auto [err, tol] = Compare(RunAll(*spec, ids), testing::ReferenceForward(random, ids));
  EXPECT_LE(err, tol);
  // Its conversions (stacked, transposed, fused layouts, other types) deferred to the write give
  // the same file.
  ExpectDeferredConversionWritesTheSameFile(dir, std::nullopt);
  EXPECT_GT(ExpectDeferredConversionWritesTheSameFile(dir, DType::kF16), 0);
}

// Layer l's feed-forward in DeepSeek's layout under `p` ("model.layers.L."): a dense MLP in the
// layers without experts, else the router, its selection bias (`bias`, of `bias_shape`, or the
// bias's own shape when empty), the experts and the shared experts.
void DeepseekLayoutFeedForward(const ModelSpec& m, int l, const std::string& p,
                               const std::string& bias, std::vector<int64_t> bias_shape,
                               std::map<std::string, RawTensor>* t) {
  if (!m.hp.layer_has_experts(l)) {
    for (const char* x : {"gate", "up", "down"}) {
      (*t)[absl::StrCat(p, "mlp.", x, "_proj.weight")] =
          RawOf(m, LayerTensorName(l, absl::StrCat("ffn_", x)));
    }
    return;
  }
  (*t)[p + "mlp.gate.weight"] = RawOf(m, LayerTensorName(l, "ffn_gate_inp"));
  (*t)[p + bias] = RawOf(m, LayerBiasName(l, "exp_probs_b"), std::move(bias_shape));
  for (const char* x : {"gate", "up", "down"}) {
    for (int e = 0; e < m.hp.n_expert; ++e) {
      (*t)[absl::StrCat(p, "mlp.experts.", e, ".", x, "_proj.weight")] =
          RawOf(m, ExpertTensorName(l, e, absl::StrCat("ffn_", x)));
    }
    (*t)[absl::StrCat(p, "mlp.shared_experts.", x, "_proj.weight")] =
        RawOf(m, LayerTensorName(l, absl::StrCat("ffn_", x, "_shexp")));
  }
}

// Ernie4_5_MoeForCausalLM: a dense first layer (moe_layer_start_index) and, after it, experts
// every second layer (moe_layer_interval) with dense MLPs between, the router's selection bias
// in moe_statics as a [1, n_experts] table, two shared experts of moe_intermediate_size, the head
// tied by Ernie4_5_MoeConfig's default (the config does not say).
TEST(HfImportTest, Ernie45MoeCheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kErnie45Moe;
  o.n_layer = 5, o.n_layer_dense = 1, o.n_ff_dense = 56, o.moe_layer_step = 2;
  o.n_ff_expert = 24, o.n_ff_shared = 48, o.selection_bias = true, o.tied_output = true;
  o.seed = 29;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  std::map<std::string, RawTensor> tensors = LlamaLayoutTensors(random);
  for (int l = 0; l < h.n_layer; ++l) {
    DeepseekLayoutFeedForward(random, l, absl::StrCat("model.layers.", l, "."),
                              "mlp.moe_statics.e_score_correction_bias", {1, h.n_expert}, &tensors);
  }
  // A multi-token-prediction weight, as the -PT checkpoints carry: not read.
  tensors["model.mtp_linear_proj.0.weight"] = RawOf(random, "output_norm.weight");
  nlohmann::json config = RandomModelConfig(h, "Ernie4_5_MoeForCausalLM", "ernie4_5_moe");
  config["intermediate_size"] = h.n_ff_dense;
  config["head_dim"] = h.head_dim;
  config["use_bias"] = false;
  config["moe_num_experts"] = h.n_expert;
  config["moe_k"] = h.n_expert_used;
  config["moe_intermediate_size"] = h.n_ff_expert;
  config["moe_num_shared_experts"] = 2;
  config["moe_layer_start_index"] = 1;
  config["moe_layer_end_index"] = h.n_layer - 1;
  config["moe_layer_interval"] = 2;
  config["moe_norm_min"] = 1e-12;
  const fs::path dir = TempDir("ernie45moe");
  WriteCheckpoint(dir, config, tensors);
  ExpectImportRunsAsReference(dir, random, Arch::kErnie45Moe);
  // Trailing dense layers (moe_layer_end_index before the last layer) are refused by name.
  config["moe_layer_end_index"] = h.n_layer - 2;
  WriteCheckpoint(dir, config, tensors);
  auto early_end = ImportHfCheckpoint(dir.string());
  ASSERT_FALSE(early_end.ok());
  EXPECT_THAT(std::string(early_end.status().message()), HasSubstr("moe_layer_end_index"));
  fs::remove_all(dir);
}

// The random model's tensor `name` as floats.
std::vector<float> FloatsOf(const ModelSpec& m, const std::string& name) {
  const RawTensor raw = RawOf(m, name);
  std::vector<float> v(raw.bytes.size() / sizeof(float));
  std::memcpy(v.data(), raw.bytes.data(), raw.bytes.size());
  return v;
}

RawTensor FloatTensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  RawTensor r;
  r.shape = std::move(shape);
  r.bytes.resize(v.size() * sizeof(float));
  std::memcpy(r.bytes.data(), v.data(), r.bytes.size());
  return r;
}

// q or k rows in transformers' order for a family whose GGUF conversion permutes them
// (llama.cpp's undo_permute): the random model's rows are the GGUF's, paired for consecutive-pair
// RoPE; transformers' rotate_half pairs i with i + head_dim / 2. Row h hd + j hd/2 + i of the
// result is row h hd + 2 i + j of the given ones.
RawTensor RotateHalfRows(const RawTensor& rows, int64_t heads, int64_t head_dim) {
  RawTensor out = rows;
  const size_t row_bytes = rows.bytes.size() / static_cast<size_t>(heads * head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        std::memcpy(out.bytes.data() + (h * head_dim + j * head_dim / 2 + i) * row_bytes,
                    rows.bytes.data() + (h * head_dim + 2 * i + j) * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

// Layer l's q_proj and k_proj under transformers' names, in its row order (RotateHalfRows).
void AddRotateHalfQk(const ModelSpec& random, int l, std::map<std::string, RawTensor>* t) {
  const HParams& h = random.hp;
  const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
  (*t)[p + "q_proj.weight"] =
      RotateHalfRows(RawOf(random, LayerTensorName(l, "attn_q")), h.n_head, h.head_dim);
  (*t)[p + "k_proj.weight"] =
      RotateHalfRows(RawOf(random, LayerTensorName(l, "attn_k")), h.n_head_kv, h.head_dim);
}

// Granite's feed-forward part of layer l in transformers' layout: the experts stacked as
// block_sparse_moe.input_linear [n, 2 ff, d] (each expert's gate rows, then its up rows) and
// output_linear [n, d, ff], the router, and the shared MLP's input_linear [2 shared, d] and
// output_linear [d, shared] when the model has one.
void AddGraniteFeedForward(const ModelSpec& random, int l, std::map<std::string, RawTensor>* t) {
  const HParams& h = random.hp;
  const std::string p = absl::StrCat("model.layers.", l, ".");
  (*t)[p + "block_sparse_moe.router.layer.weight"] =
      RawOf(random, LayerTensorName(l, "ffn_gate_inp"));
  RawTensor in, out;
  in.shape = {h.n_expert, 2 * h.n_ff_expert, h.n_embd};
  out.shape = {h.n_expert, h.n_embd, h.n_ff_expert};
  for (int e = 0; e < h.n_expert; ++e) {
    for (const char* x : {"ffn_gate", "ffn_up"}) {
      const RawTensor half = RawOf(random, ExpertTensorName(l, e, x));
      in.bytes.insert(in.bytes.end(), half.bytes.begin(), half.bytes.end());
    }
    const RawTensor down = RawOf(random, ExpertTensorName(l, e, "ffn_down"));
    out.bytes.insert(out.bytes.end(), down.bytes.begin(), down.bytes.end());
  }
  (*t)[p + "block_sparse_moe.input_linear.weight"] = std::move(in);
  (*t)[p + "block_sparse_moe.output_linear.weight"] = std::move(out);
  if (h.n_ff_shared == 0) return;
  RawTensor shared_in;
  shared_in.shape = {2 * h.n_ff_shared, h.n_embd};
  for (const char* x : {"ffn_gate_shexp", "ffn_up_shexp"}) {
    const RawTensor half = RawOf(random, LayerTensorName(l, x));
    shared_in.bytes.insert(shared_in.bytes.end(), half.bytes.begin(), half.bytes.end());
  }
  (*t)[p + "shared_mlp.input_linear.weight"] = std::move(shared_in);
  (*t)[p + "shared_mlp.output_linear.weight"] = RawOf(random, LayerTensorName(l, "ffn_down_shexp"));
}

// config.json of a random Granite model: its experts and multipliers.
nlohmann::json GraniteConfig(const HParams& h, const char* arch, const char* model_type) {
  nlohmann::json config = RandomModelConfig(h, arch, model_type);
  config["intermediate_size"] = h.n_ff_expert;
  config["shared_intermediate_size"] = h.n_ff_shared;
  config["attention_bias"] = false;
  config["num_local_experts"] = h.n_expert;
  config["num_experts_per_tok"] = h.n_expert_used;
  config["embedding_multiplier"] = h.embedding_scale;
  config["residual_multiplier"] = h.residual_scale;
  config["logits_scaling"] = h.logit_scale;
  config["attention_multiplier"] = h.kq_scale;
  config["tie_word_embeddings"] = h.tied_output;
  return config;
}

// GraniteMoeForCausalLM and GraniteMoeSharedForCausalLM: llama's attention with transformers'
// rotate_half RoPE (q and k rows as the checkpoint holds them, which llama.cpp's converter
// permutes), the experts stacked, Granite's multipliers (the residual one on the shared MLP's
// output too).
TEST(HfImportTest, GraniteMoeCheckpointRunsAsTheReference) {
  for (const int64_t shared : {0, 32}) {
    SCOPED_TRACE(shared > 0 ? "GraniteMoeShared" : "GraniteMoe");
    testing::RandomModelOptions o;
    o.arch = Arch::kGraniteMoe;
    o.n_layer = 3, o.n_head = 4, o.n_ff_expert = 24, o.n_ff_shared = shared;
    o.tied_output = true, o.seed = 41;
    // granite-3.0-1b-a400m's multipliers; the shared variant with 1s, where the residual stream
    // is not the embeddings' alone and a RoPE read with the wrong pairing shows.
    if (shared == 0) o.embedding_scale = 12.f, o.residual_scale = 0.22f, o.logit_scale = 6.f;
    o.attention_scale = 0.125f;
    const ModelSpec random = testing::MakeRandomModel(o);
    const HParams& h = random.hp;
    ASSERT_EQ(h.head_dim * h.n_head, h.n_embd);  // transformers' head size
    std::map<std::string, RawTensor> tensors = LlamaLayoutTensors(random);
    for (int l = 0; l < h.n_layer; ++l) {
      AddRotateHalfQk(random, l, &tensors);
      AddGraniteFeedForward(random, l, &tensors);
    }
    const nlohmann::json config =
        shared > 0 ? GraniteConfig(h, "GraniteMoeSharedForCausalLM", "granitemoeshared")
                   : GraniteConfig(h, "GraniteMoeForCausalLM", "granitemoe");
    const fs::path dir = TempDir("granitemoe");
    WriteCheckpoint(dir, config, tensors);
    ExpectImportRunsAsReference(dir, random, Arch::kGraniteMoe);
    fs::remove_all(dir);
  }
}

// DeepseekForCausalLM (DeepSeek-MoE, its modeling code shipped with the checkpoints): llama's
// attention with rotate_half RoPE on the rows as stored, a leading dense layer, DeepSeek's
// feed-forward names, softmax routing unnormalised, two shared experts.
TEST(HfImportTest, DeepseekMoeCheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kDeepseek;
  o.n_layer = 3, o.n_head = 4, o.n_layer_dense = 1, o.n_ff_dense = 56, o.n_ff_shared = 80;
  o.seed = 131;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  ASSERT_EQ(h.head_dim * h.n_head, h.n_embd);
  std::map<std::string, RawTensor> t = LlamaLayoutTensors(random);
  t["lm_head.weight"] = RawOf(random, "output.weight");
  for (int l = 0; l < h.n_layer; ++l) {
    AddRotateHalfQk(random, l, &t);
    const std::string p = absl::StrCat("model.layers.", l, ".");
    if (!h.layer_has_experts(l)) {
      for (const char* x : {"gate", "up", "down"}) {
        t[absl::StrCat(p, "mlp.", x, "_proj.weight")] =
            RawOf(random, LayerTensorName(l, absl::StrCat("ffn_", x)));
      }
      continue;
    }
    t[p + "mlp.gate.weight"] = RawOf(random, LayerTensorName(l, "ffn_gate_inp"));
    for (const char* x : {"gate", "up", "down"}) {
      for (int e = 0; e < h.n_expert; ++e) {
        t[absl::StrCat(p, "mlp.experts.", e, ".", x, "_proj.weight")] =
            RawOf(random, ExpertTensorName(l, e, absl::StrCat("ffn_", x)));
      }
      t[absl::StrCat(p, "mlp.shared_experts.", x, "_proj.weight")] =
          RawOf(random, LayerTensorName(l, absl::StrCat("ffn_", x, "_shexp")));
    }
  }
  nlohmann::json config = RandomModelConfig(h, "DeepseekForCausalLM", "deepseek");
  config["intermediate_size"] = h.n_ff_dense;
  config["moe_intermediate_size"] = h.n_ff_expert;
  config["n_routed_experts"] = h.n_expert;
  config["num_experts_per_tok"] = h.n_expert_used;
  config["n_shared_experts"] = h.n_ff_shared / h.n_ff_expert;
  config["first_k_dense_replace"] = 1;
  config["norm_topk_prob"] = false;
  config["scoring_func"] = "softmax";
  const fs::path dir = TempDir("deepseek");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kDeepseek);
  config["scoring_func"] = "sigmoid";
  EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("scoring_func"));
  fs::remove_all(dir);
}

// GraniteMoeHybridForCausalLM (Granite-4.0-H): layer_types names the Mamba-2 and attention layers;
// the mixer's tensors under mamba. (conv1d [channels, 1, kernel], A_log, which the runtime reads
// as A = -exp(A_log), D, the gated norm); no RoPE (position_embedding_type "nope"); Granite's
// feed-forward with a shared MLP. Projection biases are refused by name.
TEST(HfImportTest, GraniteMoeHybridCheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kGraniteHybrid;
  o.n_layer = 3, o.ssm_layers = {0, 2}, o.n_head = 4, o.n_ff_expert = 24, o.n_ff_shared = 32;
  o.embedding_scale = 12.f, o.residual_scale = 0.22f, o.logit_scale = 6.f;
  o.attention_scale = 0.125f, o.seed = 43;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  std::map<std::string, RawTensor> t;
  t["model.embed_tokens.weight"] = RawOf(random, "token_embd.weight");
  t["model.norm.weight"] = RawOf(random, "output_norm.weight");
  t["lm_head.weight"] = RawOf(random, "output.weight");
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t[p + "input_layernorm.weight"] = RawOf(random, LayerTensorName(l, "attn_norm"));
    t[p + "post_attention_layernorm.weight"] = RawOf(random, LayerTensorName(l, "ffn_norm"));
    AddGraniteFeedForward(random, l, &t);
    if (!h.layer_ssm(l)) {
      types.push_back("attention");
      AddRotateHalfQk(random, l, &t);
      t[p + "self_attn.v_proj.weight"] = RawOf(random, LayerTensorName(l, "attn_v"));
      t[p + "self_attn.o_proj.weight"] = RawOf(random, LayerTensorName(l, "attn_output"));
      continue;
    }
    types.push_back("mamba");
    const std::string m = p + "mamba.";
    t[m + "in_proj.weight"] = RawOf(random, LayerTensorName(l, "ssm_in"));
    t[m + "conv1d.weight"] = RawOf(random, LayerTensorName(l, "ssm_conv1d"),
                                   {h.ssm_conv_channels(), 1, h.ssm_conv_kernel});
    t[m + "conv1d.bias"] = RawOf(random, LayerBiasName(l, "ssm_conv1d"));
    t[m + "dt_bias"] = RawOf(random, LayerBiasName(l, "ssm_dt"));
    std::vector<float> a_log = FloatsOf(random, LayerBareName(l, "ssm_a"));
    for (float& a : a_log) a = std::log(-a);
    t[m + "A_log"] = FloatTensor({h.ssm_heads}, a_log);
    t[m + "D"] = RawOf(random, LayerBareName(l, "ssm_d"), {h.ssm_heads});
    t[m + "norm.weight"] = RawOf(random, LayerTensorName(l, "ssm_norm"), {h.ssm_inner});
    t[m + "out_proj.weight"] = RawOf(random, LayerTensorName(l, "ssm_out"));
  }
  nlohmann::json config = GraniteConfig(h, "GraniteMoeHybridForCausalLM", "granitemoehybrid");
  config["layer_types"] = types;
  config["position_embedding_type"] = "nope";
  config["mamba_n_heads"] = h.ssm_heads;
  config["mamba_n_groups"] = h.ssm_groups;
  config["mamba_d_state"] = h.ssm_state;
  config["mamba_d_head"] = "auto";
  config["mamba_d_conv"] = h.ssm_conv_kernel;
  config["mamba_expand"] = h.ssm_inner / h.n_embd;
  const fs::path dir = TempDir("granitehybrid");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kGraniteHybrid);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.ssm_layers, h.ssm_layers);
  EXPECT_EQ(spec->hp.ssm_inner, h.ssm_inner);
  config["mamba_proj_bias"] = true;
  EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("mamba_proj_bias"));
  fs::remove_all(dir);
}

// NemotronHForCausalLM with experts (Nemotron-3-Nano): hybrid_override_pattern spells each layer's
// one part under backbone.layers.L.mixer. (Mamba-2 as Granite-4.0-H's, attention without RoPE,
// or the router with its e_score_correction_bias and ungated relu^2 experts beside a shared
// one); the final norm is backbone.norm_f. Latent expert projections and other activations are
// refused by name.
TEST(HfImportTest, NemotronHCheckpointRunsAsTheReference) {
  for (const int64_t latent : {0, 16}) {
    SCOPED_TRACE(latent > 0 ? "latent experts (Nemotron 3 Super)" : "Nemotron-3-Nano");
    testing::RandomModelOptions o;
    o.arch = Arch::kNemotronHMoe;
    o.n_layer = 5, o.layer_pattern = "ME*EM", o.n_head = 4, o.n_ff_expert = 24, o.n_ff_shared = 32;
    o.selection_bias = true, o.norm_topk_prob = true, o.routed_scale = 2.5f, o.seed = 47;
    o.moe_latent = latent;
    const ModelSpec random = testing::MakeRandomModel(o);
    const HParams& h = random.hp;
    std::map<std::string, RawTensor> t;
    t["backbone.embeddings.weight"] = RawOf(random, "token_embd.weight");
    t["backbone.norm_f.weight"] = RawOf(random, "output_norm.weight");
    t["lm_head.weight"] = RawOf(random, "output.weight");
    for (int l = 0; l < h.n_layer; ++l) {
      const std::string p = absl::StrCat("backbone.layers.", l, ".");
      const std::string m = p + "mixer.";
      auto name = [&](const char* base) { return LayerTensorName(l, base); };
      t[p + "norm.weight"] = RawOf(random, name("attn_norm"));
      if (o.layer_pattern[l] == '*') {
        for (const char* x : {"q", "k", "v"}) {
          t[absl::StrCat(m, x, "_proj.weight")] =
              RawOf(random, name(absl::StrCat("attn_", x).c_str()));
        }
        t[m + "o_proj.weight"] = RawOf(random, name("attn_output"));
      } else if (o.layer_pattern[l] == 'E') {
        t[m + "gate.weight"] = RawOf(random, name("ffn_gate_inp"));
        t[m + "gate.e_score_correction_bias"] = RawOf(random, LayerBiasName(l, "exp_probs_b"));
        if (latent > 0) {
          t[m + "fc1_latent_proj.weight"] = RawOf(random, name("ffn_latent_down"));
          t[m + "fc2_latent_proj.weight"] = RawOf(random, name("ffn_latent_up"));
        }
        for (int e = 0; e < h.n_expert; ++e) {
          const std::string x = absl::StrCat(m, "experts.", e, ".");
          t[x + "up_proj.weight"] = RawOf(random, ExpertTensorName(l, e, "ffn_up"));
          t[x + "down_proj.weight"] = RawOf(random, ExpertTensorName(l, e, "ffn_down"));
        }
        t[m + "shared_experts.up_proj.weight"] = RawOf(random, name("ffn_up_shexp"));
        t[m + "shared_experts.down_proj.weight"] = RawOf(random, name("ffn_down_shexp"));
      } else {
        t[m + "in_proj.weight"] = RawOf(random, name("ssm_in"));
        t[m + "conv1d.weight"] =
            RawOf(random, name("ssm_conv1d"), {h.ssm_conv_channels(), 1, h.ssm_conv_kernel});
        t[m + "conv1d.bias"] = RawOf(random, LayerBiasName(l, "ssm_conv1d"));
        t[m + "dt_bias"] = RawOf(random, LayerBiasName(l, "ssm_dt"));
        std::vector<float> a_log = FloatsOf(random, LayerBareName(l, "ssm_a"));
        for (float& a : a_log) a = std::log(-a);
        t[m + "A_log"] = FloatTensor({h.ssm_heads}, a_log);
        t[m + "D"] = RawOf(random, LayerBareName(l, "ssm_d"), {h.ssm_heads});
        t[m + "norm.weight"] = RawOf(random, name("ssm_norm"), {h.ssm_inner});
        t[m + "out_proj.weight"] = RawOf(random, name("ssm_out"));
      }
    }
    nlohmann::json config = RandomModelConfig(h, "NemotronHForCausalLM", "nemotron_h");
    config.erase("hidden_act");
    config.erase("rms_norm_eps");
    config["layer_norm_epsilon"] = h.rms_eps;
    config["head_dim"] = h.head_dim;
    config["hybrid_override_pattern"] = o.layer_pattern;
    config["mamba_num_heads"] = h.ssm_heads;
    config["mamba_head_dim"] = h.ssm_inner / h.ssm_heads;
    config["ssm_state_size"] = h.ssm_state;
    config["n_groups"] = h.ssm_groups;
    config["conv_kernel"] = h.ssm_conv_kernel;
    config["mlp_hidden_act"] = "relu2";
    config["n_routed_experts"] = h.n_expert;
    config["num_experts_per_tok"] = h.n_expert_used;
    config["moe_intermediate_size"] = h.n_ff_expert;
    config["moe_shared_expert_intermediate_size"] = h.n_ff_shared;
    config["n_shared_experts"] = 1;
    config["norm_topk_prob"] = true;
    config["routed_scaling_factor"] = 2.5;
    config["n_group"] = 1;
    config["topk_group"] = 1;
    config["tie_word_embeddings"] = false;
    config["moe_latent_size"] = latent > 0 ? nlohmann::json(latent) : nlohmann::json(nullptr);
    const fs::path dir = TempDir("nemotron_h");
    WriteCheckpoint(dir, config, t);
    ExpectImportRunsAsReference(dir, random, Arch::kNemotronHMoe);
    auto spec = ImportHfCheckpoint(dir.string());
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->hp.ffn_only_layers, (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(spec->hp.ssm_layers, (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(spec->hp.routed_scale, 2.5f);
    EXPECT_TRUE(spec->hp.norm_topk_prob);
    EXPECT_EQ(spec->hp.moe_latent_dim, latent);
    config["mlp_hidden_act"] = "silu";
    EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("mlp_hidden_act"));
    fs::remove_all(dir);
  }
}

// Layer l's experts stacked under `x` as Llama 4 and Qwen3-VL-MoE store them: gate_up_proj
// [n, d, 2 ff] (the gate's columns, then the up's) and down_proj [n, ff, d].
void AddTransposedStackedExperts(const ModelSpec& m, int l, const std::string& x,
                                 std::map<std::string, RawTensor>* t) {
  const HParams& h = m.hp;
  const int64_t n = h.n_expert, d = h.n_embd, ff = h.n_ff_expert;
  std::vector<float> gate_up(n * d * 2 * ff), down(n * ff * d);
  for (int e = 0; e < n; ++e) {
    const std::vector<float> g = FloatsOf(m, ExpertTensorName(l, e, "ffn_gate")),
                             u = FloatsOf(m, ExpertTensorName(l, e, "ffn_up")),
                             w = FloatsOf(m, ExpertTensorName(l, e, "ffn_down"));
    for (int64_t r = 0; r < ff; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        gate_up[(e * d + c) * 2 * ff + r] = g[r * d + c];
        gate_up[(e * d + c) * 2 * ff + ff + r] = u[r * d + c];
        down[(e * ff + r) * d + c] = w[c * ff + r];
      }
    }
  }
  (*t)[x + "gate_up_proj"] = FloatTensor({n, d, 2 * ff}, gate_up);
  (*t)[x + "down_proj"] = FloatTensor({n, ff, d}, down);
}

// Llama 4's language model in transformers' layout (Llama4ForCausalLM's names): dense MLPs in the
// layers without experts; in the others the router, the shared expert, and the experts stacked
// as gate_up_proj [n, d, 2 ff] (the gate's columns, then the up's) and down_proj [n, ff, d].
std::map<std::string, RawTensor> Llama4TextTensors(const ModelSpec& m) {
  const HParams& h = m.hp;
  std::map<std::string, RawTensor> t = LlamaLayoutTensors(m);
  t["lm_head.weight"] = RawOf(m, "output.weight");
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".feed_forward.");
    if (!h.layer_has_experts(l)) {
      for (const char* x : {"gate", "up", "down"}) {
        t[absl::StrCat(p, x, "_proj.weight")] =
            RawOf(m, LayerTensorName(l, absl::StrCat("ffn_", x)));
      }
      continue;
    }
    t[p + "router.weight"] = RawOf(m, LayerTensorName(l, "ffn_gate_inp"));
    for (const char* x : {"gate", "up", "down"}) {
      t[absl::StrCat(p, "shared_expert.", x, "_proj.weight")] =
          RawOf(m, LayerTensorName(l, absl::StrCat("ffn_", x, "_shexp")));
    }
    AddTransposedStackedExperts(m, l, p + "experts.", &t);
  }
  return t;
}

// Llama4ForConditionalGeneration (Scout's and Maverick's checkpoints): the language model's
// settings in text_config, its tensors under "language_model." beside the vision tower's (not
// read). Experts every second layer with dense MLPs between, and config.json's chunk size (4) and
// temperature floor (3 positions) in place of the published 8192, so that 11 tokens cross both;
// attn_temperature_tuning written as 4, as the published configs write it. Then the same model
// as Llama4ForCausalLM with the layer lists spelled out, and each setting transformers reads
// (temperature off, no QK-norm, llama3 RoPE scaling) changing the run as the reference says.
TEST(HfImportTest, Llama4CheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kLlama4;
  o.n_layer = 5, o.n_expert_used = 2, o.n_ff_expert = 24, o.n_ff_shared = 24;
  o.moe_layer_step = 2, o.n_ff_dense = 56, o.attention_chunk = 4, o.temperature_floor = 3;
  o.seed = 47;
  ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  const std::map<std::string, RawTensor> text = Llama4TextTensors(random);
  std::map<std::string, RawTensor> tensors;
  for (const auto& [name, t] : text) tensors["language_model." + name] = t;
  tensors["vision_model.patch_embedding.linear.weight"] = RawOf(random, "output_norm.weight");
  nlohmann::json text_config = RandomModelConfig(h, "Llama4ForCausalLM", "llama4_text");
  text_config.erase("architectures");
  text_config["head_dim"] = h.head_dim;
  text_config["intermediate_size"] = h.n_ff_expert;
  text_config["intermediate_size_mlp"] = h.n_ff_dense;
  text_config["num_local_experts"] = h.n_expert;
  text_config["num_experts_per_tok"] = h.n_expert_used;
  text_config["interleave_moe_layer_step"] = 2;
  text_config["attention_chunk_size"] = 4;
  text_config["floor_scale"] = 3;
  text_config["attn_scale"] = 0.1;
  text_config["attn_temperature_tuning"] = 4;
  text_config["use_qk_norm"] = true;
  text_config["rope_scaling"] = nullptr;
  nlohmann::json config = {{"architectures", {"Llama4ForConditionalGeneration"}},
                           {"model_type", "llama4"},
                           {"text_config", text_config},
                           {"vision_config", {{"hidden_size", 16}}},
                           {"tie_word_embeddings", false}};
  const fs::path dir = TempDir("llama4");
  WriteCheckpoint(dir, config, tensors);
  ExpectImportRunsAsReference(dir, random, Arch::kLlama4);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.sliding_window, 4);
  EXPECT_TRUE(spec->hp.window_chunked);
  EXPECT_EQ(spec->hp.nope_period, 4);
  EXPECT_EQ(spec->hp.attn_temp_floor, 3);
  EXPECT_TRUE(spec->hp.expert_input_weighted);
  const std::vector<int32_t> ids = {3, 17, 96, 0, 42, 42, 7, 81, 5, 60, 11};
  const std::vector<float> with_temperature = RunAll(*spec, ids);

  // The language model alone, its layer lists written out instead of derived.
  nlohmann::json flat = text_config;
  flat["architectures"] = {"Llama4ForCausalLM"};
  flat.erase("interleave_moe_layer_step");
  flat["moe_layers"] = {1, 3};
  flat["no_rope_layers"] = {1, 1, 1, 0, 1};
  flat["layer_types"] = {"chunked_attention", "chunked_attention", "chunked_attention",
                         "full_attention", "chunked_attention"};
  const fs::path flat_dir = TempDir("llama4_text");
  WriteCheckpoint(flat_dir, flat, text);
  ExpectImportRunsAsReference(flat_dir, random, Arch::kLlama4);

  // Settings transformers reads, each against the reference changed alike.
  flat["attn_temperature_tuning"] = false;
  random.hp.attn_temp_scale = 0.f;
  WriteCheckpoint(flat_dir, flat, text);
  ExpectImportRunsAsReference(flat_dir, random, Arch::kLlama4);
  auto untuned = ImportHfCheckpoint(flat_dir.string());
  ASSERT_TRUE(untuned.ok()) << untuned.status();
  EXPECT_NE(RunAll(*untuned, ids), with_temperature);
  flat["use_qk_norm"] = false;
  random.hp.qk_norm = QkNorm::kNone;
  WriteCheckpoint(flat_dir, flat, text);
  ExpectImportRunsAsReference(flat_dir, random, Arch::kLlama4);
  // Llama 3's divisors (Scout's rope_scaling), the reference given the same rope_freqs.
  flat["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 16.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 64}};
  WriteCheckpoint(flat_dir, flat, text);
  auto scaled = ImportHfCheckpoint(flat_dir.string());
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  const TensorSpec* factors = scaled->Find(std::string(kRopeFreqsTensor));
  ASSERT_NE(factors, nullptr);
  ASSERT_EQ(factors->shape, std::vector<int64_t>{h.head_dim / 2});
  TensorSpec copy = *factors;
  auto bytes = std::make_shared<std::vector<uint8_t>>(factors->data.begin(), factors->data.end());
  copy.data = absl::MakeConstSpan(*bytes);
  random.owners.push_back(bytes);
  random.tensors.push_back(copy);
  ExpectImportRunsAsReference(flat_dir, random, Arch::kLlama4);

  // What the runtime cannot run is refused by its config.json name.
  auto refused = [&](nlohmann::json c, const char* key) {
    WriteCheckpoint(flat_dir, c, text);
    absl::Status s = ImportHfCheckpoint(flat_dir.string()).status();
    EXPECT_FALSE(s.ok()) << key;
    EXPECT_THAT(std::string(s.message()), HasSubstr(key));
  };
  nlohmann::json bad = flat;
  bad["no_rope_layers"] = {1, 0, 1, 1, 1};
  refused(bad, "no_rope_layers");
  bad = flat;
  bad["moe_layers"] = {1, 2};
  refused(bad, "moe_layers");
  bad = flat;
  bad["attention_bias"] = true;
  refused(bad, "attention_bias");
  bad = flat;
  bad["attention_chunk_size"] = nullptr;
  refused(bad, "attention_chunk_size");
  bad = config;
  bad.erase("text_config");
  refused(bad, "text_config");
  fs::remove_all(dir);
  fs::remove_all(flat_dir);
}

// BailingMoeV2ForCausalLM (Ling 2.0): q/k/v fused in query_key_value, per-head query/key
// layernorms, RoPE over half of each head (partial_rotary_factor), a dense first layer, sigmoid
// routing with the router's expert_bias among the best 2 of 4 groups, renormalised and scaled, a
// shared expert; the embeddings as word_embeddings, an MTP layer after the last one (not read).
TEST(HfImportTest, BailingMoeV2CheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kBailingMoe2;
  o.n_layer = 3, o.n_layer_dense = 1, o.n_ff_dense = 56, o.n_expert = 8, o.n_expert_used = 3;
  o.n_ff_shared = 40, o.rope_dim = 6, o.qk_norm = QkNorm::kPerHead, o.selection_bias = true;
  o.expert_groups = 4, o.expert_groups_used = 2, o.norm_topk_prob = true, o.routed_scale = 2.5f;
  o.seed = 61;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  std::map<std::string, RawTensor> t;
  t["model.word_embeddings.weight"] = RawOf(random, "token_embd.weight");
  t["model.norm.weight"] = RawOf(random, "output_norm.weight");
  t["lm_head.weight"] = RawOf(random, "output.weight");
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    t[p + "input_layernorm.weight"] = RawOf(random, name("attn_norm"));
    RawTensor qkv = RawOf(random, name("attn_q"));
    for (const char* x : {"attn_k", "attn_v"}) {
      const RawTensor part = RawOf(random, name(x));
      qkv.bytes.insert(qkv.bytes.end(), part.bytes.begin(), part.bytes.end());
      qkv.shape[0] += part.shape[0];
    }
    t[p + "attention.query_key_value.weight"] = std::move(qkv);
    t[p + "attention.query_layernorm.weight"] = RawOf(random, name("attn_q_norm"));
    t[p + "attention.key_layernorm.weight"] = RawOf(random, name("attn_k_norm"));
    t[p + "attention.dense.weight"] = RawOf(random, name("attn_output"));
    t[p + "post_attention_layernorm.weight"] = RawOf(random, name("ffn_norm"));
    DeepseekLayoutFeedForward(random, l, p, "mlp.gate.expert_bias", {}, &t);
  }
  t[absl::StrCat("model.layers.", h.n_layer, ".final_layernorm.weight")] =
      RawOf(random, "output_norm.weight");  // the MTP layer's: not read
  nlohmann::json config = RandomModelConfig(h, "BailingMoeV2ForCausalLM", "bailing_moe_v2");
  config["head_dim"] = h.head_dim;
  config["partial_rotary_factor"] = 0.5;
  config["use_qk_norm"] = true;
  config["use_qkv_bias"] = false;
  config["use_bias"] = false;
  config["intermediate_size"] = h.n_ff_dense;
  config["moe_intermediate_size"] = h.n_ff_expert;
  config["moe_shared_expert_intermediate_size"] = h.n_ff_shared;
  config["num_experts"] = h.n_expert;
  config["num_experts_per_tok"] = h.n_expert_used;
  config["num_shared_experts"] = 1;
  config["first_k_dense_replace"] = 1;
  config["n_group"] = 4;
  config["topk_group"] = 2;
  config["score_function"] = "sigmoid";
  config["norm_topk_prob"] = true;
  config["routed_scaling_factor"] = 2.5;
  config["moe_router_enable_expert_bias"] = true;
  config["num_nextn_predict_layers"] = 1;
  config["tie_word_embeddings"] = false;
  const fs::path dir = TempDir("bailingmoe2");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kBailingMoe2);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.rope_dim, 6);
  EXPECT_EQ(spec->hp.n_expert_groups, 4);
  EXPECT_EQ(spec->hp.n_group_used, 2);
  EXPECT_EQ(spec->hp.routed_scale, 2.5f);
  EXPECT_EQ(spec->hp.qk_norm, QkNorm::kPerHead);
  // Configs the modeling code and llama.cpp's converter would read apart are refused by name.
  nlohmann::json bad = config;
  bad["norm_topk_prob"] = false;
  EXPECT_THAT(RefusalOf(dir, bad, t), HasSubstr("norm_topk_prob"));
  bad = config;
  bad["rotary_dim"] = 12;
  EXPECT_THAT(RefusalOf(dir, bad, t), HasSubstr("rotary_dim"));
  fs::remove_all(dir);
}

// MiniMaxM2ForCausalLM: Mixtral's names (block_sparse_moe, w1 / w3 / w2) with an RMSNorm over the
// whole q and k projections, RoPE over rotary_dim of each head, sigmoid routing chosen with the
// router's e_score_correction_bias, the weights renormalised.
TEST(HfImportTest, MinimaxM2CheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kMinimaxM2;
  o.n_layer = 3, o.n_expert = 9, o.n_expert_used = 3, o.rope_dim = 6, o.qk_norm = QkNorm::kFull;
  o.selection_bias = true, o.seed = 73;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  std::map<std::string, RawTensor> t = LlamaLayoutTensors(random);
  t["lm_head.weight"] = RawOf(random, "output.weight");
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t[p + "self_attn.q_norm.weight"] = RawOf(random, LayerTensorName(l, "attn_q_norm"));
    t[p + "self_attn.k_norm.weight"] = RawOf(random, LayerTensorName(l, "attn_k_norm"));
    t[p + "block_sparse_moe.gate.weight"] = RawOf(random, LayerTensorName(l, "ffn_gate_inp"));
    t[p + "block_sparse_moe.e_score_correction_bias"] =
        RawOf(random, LayerBiasName(l, "exp_probs_b"));
    for (int e = 0; e < h.n_expert; ++e) {
      const std::string x = absl::StrCat(p, "block_sparse_moe.experts.", e, ".");
      t[x + "w1.weight"] = RawOf(random, ExpertTensorName(l, e, "ffn_gate"));
      t[x + "w3.weight"] = RawOf(random, ExpertTensorName(l, e, "ffn_up"));
      t[x + "w2.weight"] = RawOf(random, ExpertTensorName(l, e, "ffn_down"));
    }
  }
  nlohmann::json config = RandomModelConfig(h, "MiniMaxM2ForCausalLM", "minimax_m2");
  config["head_dim"] = h.head_dim;
  config["rotary_dim"] = 6;
  config["intermediate_size"] = h.n_ff_expert;
  config["num_local_experts"] = h.n_expert;
  config["num_experts_per_tok"] = h.n_expert_used;
  config["scoring_func"] = "sigmoid";
  config["use_qk_norm"] = true;
  config["qk_norm_type"] = "per_layer";
  config["use_routing_bias"] = true;
  const fs::path dir = TempDir("minimax_m2");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kMinimaxM2);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.rope_dim, 6);
  EXPECT_EQ(spec->hp.qk_norm, QkNorm::kFull);
  EXPECT_TRUE(spec->hp.norm_topk_prob);
  // What transformers' model does not run is refused by name.
  config["scoring_func"] = "softmax";
  EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("scoring_func"));
  fs::remove_all(dir);
}

// Dots1ForCausalLM: Qwen3's attention with per-head q_norm / k_norm, a dense first layer, then
// DeepSeek-V3's routing (sigmoid chosen with mlp.gate.e_score_correction_bias among the best 2 of
// 3 groups, renormalised, x 2.5) beside two shared experts.
TEST(HfImportTest, Dots1CheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kDots1;
  o.n_layer = 3, o.n_head_kv = 6, o.n_layer_dense = 1, o.n_ff_dense = 56, o.n_expert = 9;
  o.n_expert_used = 3, o.n_ff_shared = 80, o.selection_bias = true, o.expert_groups = 3;
  o.expert_groups_used = 2, o.norm_topk_prob = true, o.routed_scale = 2.5f, o.seed = 83;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  std::map<std::string, RawTensor> t = LlamaLayoutTensors(random);
  t["lm_head.weight"] = RawOf(random, "output.weight");
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t[p + "self_attn.q_norm.weight"] = RawOf(random, LayerTensorName(l, "attn_q_norm"));
    t[p + "self_attn.k_norm.weight"] = RawOf(random, LayerTensorName(l, "attn_k_norm"));
    DeepseekLayoutFeedForward(random, l, p, "mlp.gate.e_score_correction_bias", {}, &t);
  }
  nlohmann::json config = RandomModelConfig(h, "Dots1ForCausalLM", "dots1");
  config["head_dim"] = h.head_dim;
  config["intermediate_size"] = h.n_ff_dense;
  config["moe_intermediate_size"] = h.n_ff_expert;
  config["n_routed_experts"] = h.n_expert;
  config["num_experts_per_tok"] = h.n_expert_used;
  config["n_shared_experts"] = 2;
  config["first_k_dense_replace"] = 1;
  config["n_group"] = 3;
  config["topk_group"] = 2;
  config["norm_topk_prob"] = true;
  config["routed_scaling_factor"] = 2.5;
  config["sliding_window"] = nullptr;
  const fs::path dir = TempDir("dots1");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kDots1);
  // Sliding-window layers (Dots1Config can name them) are refused by name.
  config["sliding_window"] = 16;
  config["max_window_layers"] = 2;
  EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("max_window_layers"));
  fs::remove_all(dir);
}

// Lfm2MoeForCausalLM: short-convolution layers (conv.conv stored [d, 1, kernel]) around an
// attending layer with q_layernorm / k_layernorm, a dense first layer, then sigmoid routing chosen
// with feed_forward.expert_bias, renormalised and x 1.5 (routed_scaling_factor, which the GGUF
// cannot state); the output tied to the embeddings, as Lfm2MoeConfig assumes.
TEST(HfImportTest, Lfm2MoeCheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kLfm2Moe;
  o.n_layer = 4, o.short_conv_layers = {0, 2, 3}, o.n_layer_dense = 1, o.n_ff_dense = 56;
  o.n_head = 4, o.n_head_kv = 2, o.head_dim = 12;  // LFM2's heads span the embedding
  o.n_expert = 9, o.selection_bias = true, o.routed_scale = 1.5f, o.tied_output = true;
  o.seed = 97;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  std::map<std::string, RawTensor> t;
  t["model.embed_tokens.weight"] = RawOf(random, "token_embd.weight");
  t["model.embedding_norm.weight"] = RawOf(random, "token_embd_norm.weight");
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto raw = [&](const char* base) { return RawOf(random, LayerTensorName(l, base)); };
    t[p + "operator_norm.weight"] = raw("attn_norm");
    t[p + "ffn_norm.weight"] = raw("ffn_norm");
    if (h.layer_short_conv(l)) {
      types.push_back("conv");
      t[p + "conv.in_proj.weight"] = raw("shortconv.in_proj");
      t[p + "conv.out_proj.weight"] = raw("shortconv.out_proj");
      t[p + "conv.conv.weight"] =
          RawOf(random, LayerTensorName(l, "shortconv.conv"), {h.n_embd, 1, h.short_conv_kernel});
    } else {
      types.push_back("full_attention");
      for (const char* x : {"q", "k", "v"}) {
        t[absl::StrCat(p, "self_attn.", x, "_proj.weight")] = raw(absl::StrCat("attn_", x).c_str());
      }
      t[p + "self_attn.out_proj.weight"] = raw("attn_output");
      t[p + "self_attn.q_layernorm.weight"] = raw("attn_q_norm");
      t[p + "self_attn.k_layernorm.weight"] = raw("attn_k_norm");
    }
    const std::string f = p + "feed_forward.";
    const std::pair<const char*, const char*> kParts[] = {
        {"w1", "ffn_gate"}, {"w3", "ffn_up"}, {"w2", "ffn_down"}};
    if (!h.layer_has_experts(l)) {
      for (const auto& [hf, ours] : kParts) t[absl::StrCat(f, hf, ".weight")] = raw(ours);
      continue;
    }
    t[f + "gate.weight"] = raw("ffn_gate_inp");
    t[f + "expert_bias"] = RawOf(random, LayerBiasName(l, "exp_probs_b"));
    for (int e = 0; e < h.n_expert; ++e) {
      for (const auto& [hf, ours] : kParts) {
        t[absl::StrCat(f, "experts.", e, ".", hf, ".weight")] =
            RawOf(random, ExpertTensorName(l, e, ours));
      }
    }
  }
  nlohmann::json config = RandomModelConfig(h, "Lfm2MoeForCausalLM", "lfm2_moe");
  config.erase("rms_norm_eps");
  config["norm_eps"] = 1e-6;
  config["layer_types"] = types;
  config["conv_L_cache"] = h.short_conv_kernel;
  config["num_dense_layers"] = 1;
  config["intermediate_size"] = h.n_ff_dense;
  config["moe_intermediate_size"] = h.n_ff_expert;
  config["num_experts"] = h.n_expert;
  config["num_experts_per_tok"] = h.n_expert_used;
  config["routed_scaling_factor"] = 1.5;
  const fs::path dir = TempDir("lfm2moe");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kLfm2Moe);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.short_conv_layers, h.short_conv_layers);
  // Biased convolutions and a layer list of the wrong length are refused by name.
  config["conv_bias"] = true;
  EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("conv_bias"));
  config["conv_bias"] = false;
  config["layer_types"].erase(0);
  EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("layer_types"));
  fs::remove_all(dir);
}

// Rows of `v` (rows of `row_len` values) in another order: row R of the result is row
// source_row(R) of v.
std::vector<float> ReorderRows(const std::vector<float>& v, int64_t row_len,
                               const std::function<int64_t(int64_t)>& source_row) {
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < std::ssize(v) / row_len; ++r) {
    std::copy_n(v.begin() + source_row(r) * row_len, row_len, out.begin() + r * row_len);
  }
  return out;
}

// Qwen3.5-MoE's and Qwen3-Next's checkpoints written from a random model of the runtime's layout
// as transformers keeps them (tests/model/reference_model runs the runtime's): every RMSNorm but
// the delta net's stored as w - 1 (Qwen3NextRMSNorm scales by 1 + w), A as A_log = log(-A), the
// delta net's value heads grouped by key head (the checkpoint's value head g r + j is key head
// g's j-th), Qwen3-Next's q, k, v and z fused per key head. `tiled`: the runtime's value heads
// are in llama.cpp's tiled order (Qwen3.5: its value head j KH + g is the checkpoint's g r + j).
std::map<std::string, RawTensor> QwenDeltaNetCheckpoint(const ModelSpec& m, bool tiled,
                                                        bool stacked_experts,
                                                        const std::string& root) {
  const HParams& h = m.hp;
  const int64_t d = h.n_embd, S = h.ssm_state, KH = h.ssm_groups, H = h.ssm_heads, r = H / KH;
  const int64_t key_dim = KH * S, I = H * S, C = h.ssm_conv_channels(), K = h.ssm_conv_kernel;
  const int64_t n = h.n_expert, ff = h.n_ff_expert;
  // The runtime's value head that holds the checkpoint's value head `grouped`.
  auto runtime_head = [&](int64_t grouped) {
    return tiled ? grouped % r * KH + grouped / r : grouped;
  };
  auto less_one = [&](const std::string& name) {
    std::vector<float> v = FloatsOf(m, name);
    for (float& x : v) x -= 1.f;
    return FloatTensor({std::ssize(v)}, v);
  };
  // Per value head rows (rows_per_head each) from the runtime's order into the checkpoint's.
  auto grouped_rows = [&](const std::vector<float>& v, int64_t row_len, int64_t rows_per_head) {
    return ReorderRows(v, row_len, [&](int64_t row) {
      return runtime_head(row / rows_per_head) * rows_per_head + row % rows_per_head;
    });
  };
  std::map<std::string, RawTensor> t;
  t[root + "embed_tokens.weight"] = RawOf(m, "token_embd.weight");
  t[root + "norm.weight"] = less_one("output_norm.weight");
  t["lm_head.weight"] = RawOf(m, "output.weight");
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat(root, "layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    t[p + "input_layernorm.weight"] = less_one(name("attn_norm"));
    t[p + "post_attention_layernorm.weight"] = less_one(name("post_attention_norm"));
    if (h.layer_ssm(l)) {
      const std::string x = p + "linear_attn.";
      const std::vector<float> qkv = FloatsOf(m, name("attn_qkv")),
                               z = FloatsOf(m, name("attn_gate"));
      // q and k rows stay; the value rows go to their grouped places.
      std::vector<float> v(qkv.begin() + 2 * key_dim * d, qkv.end());
      v = grouped_rows(v, d, S);
      std::vector<float> qkv_grouped(qkv.begin(), qkv.begin() + 2 * key_dim * d);
      qkv_grouped.insert(qkv_grouped.end(), v.begin(), v.end());
      const std::vector<float> z_grouped = grouped_rows(z, d, S);
      if (tiled) {
        t[x + "in_proj_qkv.weight"] = FloatTensor({C, d}, qkv_grouped);
        t[x + "in_proj_z.weight"] = FloatTensor({I, d}, z_grouped);
        t[x + "in_proj_b.weight"] =
            FloatTensor({H, d}, grouped_rows(FloatsOf(m, name("ssm_beta")), d, 1));
        t[x + "in_proj_a.weight"] =
            FloatTensor({H, d}, grouped_rows(FloatsOf(m, name("ssm_alpha")), d, 1));
      } else {
        // Per key head g: its q, its k, its r value heads' v, their z.
        std::vector<float> fused;
        for (int64_t g = 0; g < KH; ++g) {
          auto rows = [&](const std::vector<float>& src, int64_t first, int64_t count) {
            fused.insert(fused.end(), src.begin() + first * d, src.begin() + (first + count) * d);
          };
          rows(qkv_grouped, g * S, S);
          rows(qkv_grouped, key_dim + g * S, S);
          rows(qkv_grouped, 2 * key_dim + g * r * S, r * S);
          rows(z_grouped, g * r * S, r * S);
        }
        t[x + "in_proj_qkvz.weight"] = FloatTensor({KH * (2 * S + 2 * r * S), d}, fused);
        t[x + "in_proj_ba.weight"] = RawOf(m, name("ssm_ba"));
      }
      std::vector<float> conv = FloatsOf(m, name("ssm_conv1d"));
      std::vector<float> conv_v(conv.begin() + 2 * key_dim * K, conv.end());
      conv_v = grouped_rows(conv_v, K, S);
      std::copy(conv_v.begin(), conv_v.end(), conv.begin() + 2 * key_dim * K);
      t[x + "conv1d.weight"] = FloatTensor({C, 1, K}, conv);
      t[x + "dt_bias"] =
          FloatTensor({H}, grouped_rows(FloatsOf(m, LayerBiasName(l, "ssm_dt")), 1, 1));
      std::vector<float> a_log = grouped_rows(FloatsOf(m, LayerBareName(l, "ssm_a")), 1, 1);
      for (float& a : a_log) a = std::log(-a);
      t[x + "A_log"] = FloatTensor({H}, a_log);
      t[x + "norm.weight"] = RawOf(m, name("ssm_norm"));  // a plain RMSNorm weight
      // The output projection's columns, per value head, to their grouped places.
      const std::vector<float> out = FloatsOf(m, name("ssm_out"));
      std::vector<float> out_grouped(out.size());
      for (int64_t row = 0; row < d; ++row) {
        for (int64_t col = 0; col < I; ++col) {
          out_grouped[row * I + col] = out[row * I + runtime_head(col / S) * S + col % S];
        }
      }
      t[x + "out_proj.weight"] = FloatTensor({d, I}, out_grouped);
    } else {
      const std::string a = p + "self_attn.";
      for (const char* x : {"q", "k", "v"}) {
        t[absl::StrCat(a, x, "_proj.weight")] = RawOf(m, name(absl::StrCat("attn_", x).c_str()));
      }
      t[a + "o_proj.weight"] = RawOf(m, name("attn_output"));
      t[a + "q_norm.weight"] = less_one(name("attn_q_norm"));
      t[a + "k_norm.weight"] = less_one(name("attn_k_norm"));
    }
    const std::string f = p + "mlp.";
    t[f + "gate.weight"] = RawOf(m, name("ffn_gate_inp"));
    t[f + "shared_expert_gate.weight"] = RawOf(m, name("ffn_gate_inp_shexp"), {1, d});
    for (const char* x : {"gate", "up", "down"}) {
      t[absl::StrCat(f, "shared_expert.", x, "_proj.weight")] =
          RawOf(m, name(absl::StrCat("ffn_", x, "_shexp").c_str()));
    }
    if (!stacked_experts) {
      for (int e = 0; e < n; ++e) {
        for (const char* x : {"gate", "up", "down"}) {
          t[absl::StrCat(f, "experts.", e, ".", x, "_proj.weight")] =
              RawOf(m, ExpertTensorName(l, e, absl::StrCat("ffn_", x)));
        }
      }
      continue;
    }
    // gate_up_proj [n, 2 ff, d]: each expert's gate rows, then its up rows; down_proj [n, d, ff].
    std::vector<float> gate_up, down;
    for (int e = 0; e < n; ++e) {
      for (const char* x : {"ffn_gate", "ffn_up"}) {
        const std::vector<float> rows = FloatsOf(m, ExpertTensorName(l, e, x));
        gate_up.insert(gate_up.end(), rows.begin(), rows.end());
      }
      const std::vector<float> rows = FloatsOf(m, ExpertTensorName(l, e, "ffn_down"));
      down.insert(down.end(), rows.begin(), rows.end());
    }
    t[f + "experts.gate_up_proj"] = FloatTensor({n, 2 * ff, d}, gate_up);
    t[f + "experts.down_proj"] = FloatTensor({n, d, ff}, down);
  }
  return t;
}

// The language model's config.json keys of a random Qwen3.5-MoE / Qwen3-Next model.
nlohmann::json QwenDeltaNetConfig(const HParams& h, const char* arch, const char* model_type) {
  nlohmann::json c = RandomModelConfig(h, arch, model_type);
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < h.n_layer; ++l) {
    types.push_back(h.layer_ssm(l) ? "linear_attention" : "full_attention");
  }
  c["layer_types"] = types;
  c["head_dim"] = h.head_dim;
  c["partial_rotary_factor"] = static_cast<double>(h.rope_dim) / h.head_dim;
  c["linear_conv_kernel_dim"] = h.ssm_conv_kernel;
  c["linear_key_head_dim"] = h.ssm_state;
  c["linear_value_head_dim"] = h.ssm_state;
  c["linear_num_key_heads"] = h.ssm_groups;
  c["linear_num_value_heads"] = h.ssm_heads;
  c["num_experts"] = h.n_expert;
  c["num_experts_per_tok"] = h.n_expert_used;
  c["moe_intermediate_size"] = h.n_ff_expert;
  c["shared_expert_intermediate_size"] = h.n_ff_shared;
  c["norm_topk_prob"] = true;
  c["tie_word_embeddings"] = false;
  return c;
}

// Qwen3.5's rope_parameters (transformers v5) for the random model: its partial RoPE and
// multimodal sections that cover every rotated pair, as the random model's.
nlohmann::json Qwen35RopeParameters(const HParams& h) {
  const int64_t pairs = h.rope_dim / 2;
  return {{"rope_type", "default"},
          {"rope_theta", 10000.0},
          {"partial_rotary_factor", static_cast<double>(h.rope_dim) / h.head_dim},
          {"mrope_interleaved", true},
          {"mrope_section", {pairs - 2 * (pairs / 3), pairs / 3, pairs / 3}}};
}

// Qwen3_5MoeForConditionalGeneration (Qwen3.5-35B-A3B's checkpoints): the language model's
// settings in text_config (RoPE in rope_parameters with its multimodal sections), its tensors
// under model.language_model. beside the vision tower's and the MTP block's (not read), experts
// stacked; then Qwen3_5MoeForCausalLM's text-only layout with per-expert tensors. Three value heads
// per key head, so the runtime's tiled order differs from the checkpoint's grouped one; an
// attention layer between delta nets.
TEST(HfImportTest, Qwen35MoeCheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kQwen35Moe;
  o.n_layer = 4, o.ssm_layers = {0, 2, 3}, o.ssm_heads = 6, o.ssm_groups = 2;
  o.n_ff_shared = 40, o.rope_dim = 6, o.seed = 173;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  std::map<std::string, RawTensor> t = QwenDeltaNetCheckpoint(
      random, /*tiled=*/true, /*stacked_experts=*/true, "model.language_model.");
  t["model.visual.patch_embed.proj.weight"] = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
  t["mtp.fc.weight"] = FloatTensor({2, 2}, {1, 2, 3, 4});
  nlohmann::json text = QwenDeltaNetConfig(h, "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text");
  text.erase("architectures");
  text.erase("rope_theta");
  text.erase("partial_rotary_factor");
  text["rope_parameters"] = Qwen35RopeParameters(h);
  text["attn_output_gate"] = true;
  text["mtp_num_hidden_layers"] = 1;
  const nlohmann::json config = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                                 {"model_type", "qwen3_5_moe"},
                                 {"text_config", text},
                                 {"vision_config", {{"depth", 2}}},
                                 {"tie_word_embeddings", false}};
  const fs::path dir = TempDir("qwen35moe");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kQwen35Moe);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.ssm_layers, h.ssm_layers);
  EXPECT_EQ(spec->hp.rope_dim, h.rope_dim);
  EXPECT_FALSE(spec->hp.ssm_grouped_heads);
  // An expert's matrices sliced from a stack are spans of the mapped checkpoint, not copies.
  for (const char* part : {"ffn_gate", "ffn_up", "ffn_down"}) {
    const TensorSpec* x = spec->Find(ExpertTensorName(1, 2, part));
    ASSERT_NE(x, nullptr) << part;
    bool in_file = false;
    for (const ModelSpec::SourceFile& f : spec->source_files) {
      in_file |= x->data.data() >= f.base && x->data.data() + x->data.size() <= f.base + f.size;
    }
    EXPECT_TRUE(in_file) << part << " was copied";
  }

  // The text-only class: config.json is the language model's, tensors under model.
  nlohmann::json causal = QwenDeltaNetConfig(h, "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text");
  causal["rope_parameters"] = text["rope_parameters"];
  fs::remove_all(dir);
  fs::create_directories(dir);
  WriteCheckpoint(dir, causal, QwenDeltaNetCheckpoint(random, true, false, "model."));
  ExpectImportRunsAsReference(dir, random, Arch::kQwen35Moe);

  // Settings the runtime does not run are refused by name.
  causal["attn_output_gate"] = false;
  EXPECT_THAT(RefusalOf(dir, causal, QwenDeltaNetCheckpoint(random, true, false, "model.")),
              HasSubstr("attn_output_gate"));
  causal["attn_output_gate"] = true;
  causal["linear_value_head_dim"] = 2 * h.ssm_state;
  EXPECT_THAT(RefusalOf(dir, causal, QwenDeltaNetCheckpoint(random, true, false, "model.")),
              HasSubstr("linear_value_head_dim"));
  fs::remove_all(dir);
}

// Experts stacked in FP8 (experts.gate_up_proj / down_proj with a factor per block of each
// expert's matrix, [n_expert, rows / block, cols / block]): dequantized per matrix, each stack
// once for all its experts, to exactly what the values written as F32 give.
TEST(HfImportTest, StackedFp8ExpertsAreDequantizedPerMatrix) {
  testing::RandomModelOptions o;
  o.arch = Arch::kQwen35Moe;
  o.n_layer = 2, o.ssm_layers = {0}, o.n_ff_shared = 40, o.rope_dim = 6, o.seed = 191;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  const std::map<std::string, RawTensor> plain =
      QwenDeltaNetCheckpoint(random, /*tiled=*/true, /*stacked_experts=*/true, "model.");
  std::map<std::string, RawTensor> fp8 = plain, exact = plain;
  std::mt19937 rng(5);
  for (int l = 0; l < h.n_layer; ++l) {
    for (const char* x : {"gate_up_proj", "down_proj"}) {
      const std::string name = absl::StrCat("model.layers.", l, ".mlp.experts.", x);
      AsBlockScaledFp8(name, plain.at(name).shape, 8, rng, &fp8, &exact);
    }
  }
  nlohmann::json config = QwenDeltaNetConfig(h, "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text");
  config["rope_parameters"] = Qwen35RopeParameters(h);
  const fs::path fp8_dir = TempDir("stacked_fp8"), exact_dir = TempDir("stacked_fp8_exact");
  WriteCheckpoint(exact_dir, config, exact);
  config["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {8, 8}}};
  WriteCheckpoint(fp8_dir, config, fp8);
  auto from_fp8 = ImportHfCheckpoint(fp8_dir.string(), DType::kF32);
  ASSERT_TRUE(from_fp8.ok()) << from_fp8.status();
  auto want = ImportHfCheckpoint(exact_dir.string(), DType::kF32);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(from_fp8->tensors.size(), want->tensors.size());
  for (const TensorSpec& t : want->tensors) {
    const TensorSpec* got = from_fp8->Find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), got->data.begin(), got->data.end()))
        << t.name;
  }
  fs::remove_all(fp8_dir);
  fs::remove_all(exact_dir);
}

// Qwen3NextForCausalLM (Qwen3-Next-80B-A3B): q, k, v and z of each key head fused in in_proj_qkvz,
// beta and alpha in in_proj_ba, the value heads kept grouped by key head; no layer_types, so the
// layers follow full_attention_interval.
TEST(HfImportTest, Qwen3NextCheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kQwen3Next;
  o.n_layer = 4, o.ssm_layers = {0, 1, 2}, o.ssm_heads = 6, o.ssm_groups = 2;
  o.n_ff_shared = 40, o.rope_dim = 6, o.seed = 179;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  nlohmann::json config = QwenDeltaNetConfig(h, "Qwen3NextForCausalLM", "qwen3_next");
  config.erase("layer_types");
  config["full_attention_interval"] = 4;
  config["decoder_sparse_step"] = 1;
  config["mlp_only_layers"] = nlohmann::json::array();
  const fs::path dir = TempDir("qwen3next");
  const auto tensors = QwenDeltaNetCheckpoint(random, /*tiled=*/false, false, "model.");
  WriteCheckpoint(dir, config, tensors);
  ExpectImportRunsAsReference(dir, random, Arch::kQwen3Next);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.ssm_layers, h.ssm_layers);
  EXPECT_TRUE(spec->hp.ssm_grouped_heads);
  config["mlp_only_layers"] = {1};
  EXPECT_THAT(RefusalOf(dir, config, tensors), HasSubstr("mlp_only_layers"));
  fs::remove_all(dir);
}

// Qwen3VLMoeForConditionalGeneration (Qwen3-VL-30B-A3B): the language model's settings in
// text_config (its multimodal RoPE sections in rope_scaling), its tensors under
// model.language_model. beside the vision tower's (not read); Qwen3-MoE's layers with the experts
// stacked as Llama 4 stacks them.
TEST(HfImportTest, Qwen3VlMoeCheckpointRunsAsTheReference) {
  testing::RandomModelOptions o;
  o.arch = Arch::kQwen3VlMoe;
  o.n_layer = 3, o.seed = 181;
  const ModelSpec random = testing::MakeRandomModel(o);
  const HParams& h = random.hp;
  const std::string root = "model.language_model.";
  std::map<std::string, RawTensor> t;
  t[root + "embed_tokens.weight"] = RawOf(random, "token_embd.weight");
  t[root + "norm.weight"] = RawOf(random, "output_norm.weight");
  t["lm_head.weight"] = RawOf(random, "output.weight");
  t["model.visual.patch_embed.proj.weight"] = FloatTensor({2, 2}, {1, 2, 3, 4});
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat(root, "layers.", l, ".");
    auto raw = [&](const std::string& base) { return RawOf(random, LayerTensorName(l, base)); };
    t[p + "input_layernorm.weight"] = raw("attn_norm");
    t[p + "post_attention_layernorm.weight"] = raw("ffn_norm");
    for (const char* x : {"q", "k", "v"}) {
      t[absl::StrCat(p, "self_attn.", x, "_proj.weight")] = raw(absl::StrCat("attn_", x));
    }
    t[p + "self_attn.o_proj.weight"] = raw("attn_output");
    t[p + "self_attn.q_norm.weight"] = raw("attn_q_norm");
    t[p + "self_attn.k_norm.weight"] = raw("attn_k_norm");
    t[p + "mlp.gate.weight"] = raw("ffn_gate_inp");
    AddTransposedStackedExperts(random, l, p + "mlp.experts.", &t);
  }
  nlohmann::json text =
      RandomModelConfig(h, "Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe_text");
  text.erase("architectures");
  text["head_dim"] = h.head_dim;
  text["num_experts"] = h.n_expert;
  text["num_experts_per_tok"] = h.n_expert_used;
  text["moe_intermediate_size"] = h.n_ff_expert;
  text["rope_scaling"] = {
      {"rope_type", "default"},
      {"mrope_interleaved", true},
      {"mrope_section", {h.rope_sections[0], h.rope_sections[1], h.rope_sections[2]}}};
  nlohmann::json config = {{"architectures", {"Qwen3VLMoeForConditionalGeneration"}},
                           {"model_type", "qwen3_vl_moe"},
                           {"text_config", text},
                           {"vision_config", {{"deepstack_visual_indexes", {1}}}}};
  const fs::path dir = TempDir("qwen3vlmoe");
  WriteCheckpoint(dir, config, t);
  ExpectImportRunsAsReference(dir, random, Arch::kQwen3VlMoe);
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->hp.rope_sections, h.rope_sections);
  EXPECT_EQ(spec->hp.qk_norm, QkNorm::kPerHead);
  config["text_config"]["norm_topk_prob"] = false;
  EXPECT_THAT(RefusalOf(dir, config, t), HasSubstr("norm_topk_prob"));
  fs::remove_all(dir);
}

// A chat template in its own file, as newer checkpoints keep it: chat_template.jinja, which
// transformers takes over tokenizer_config.json's, and a processor's chat_template.json (Llama
// 4's repositories), taken when tokenizer_config.json has none.
TEST(HfImportTest, ChatTemplateFilesBesideTheTokenizer) {
  const fs::path dir = TempDir("chat_template_files");
  ASSERT_NO_FATAL_FAILURE(WriteCheckpointWithSpmTokenizerJson(dir));
  auto template_of = [&]() {
    auto spec = ImportHfCheckpoint(dir.string());
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? spec->tokenizer.chat_template : std::string("(failed)");
  };
  EXPECT_EQ(template_of(), "");
  std::ofstream(dir / "chat_template.json")
      << nlohmann::json({{"chat_template", "from processor"}}).dump();
  EXPECT_EQ(template_of(), "from processor");
  std::ofstream(dir / "tokenizer_config.json")
      << nlohmann::json({{"chat_template", "from tokenizer_config"}}).dump();
  EXPECT_EQ(template_of(), "from tokenizer_config");
  std::ofstream(dir / "chat_template.jinja") << "from jinja {{ messages }}";
  EXPECT_EQ(template_of(), "from jinja {{ messages }}");
  fs::remove(dir / "chat_template.jinja");
  fs::remove(dir / "tokenizer_config.json");
  std::ofstream(dir / "chat_template.json") << "[1, 2]";
  auto broken = ImportHfCheckpoint(dir.string());
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("chat_template.json"));
  fs::remove_all(dir);
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, LogitsMatchPyTorchReference) {
  const fs::path dir = FixtureDir(GetParam());
  auto spec = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::vector<int32_t> ids = ReadIds(dir / "tokens.txt");
  const std::vector<float> want = ReadFloats(dir / "logits.f32");
  ASSERT_EQ(want.size(), ids.size() * spec->hp.n_vocab);
  std::vector<float> got = RunAll(*spec, ids);
  ASSERT_EQ(got.size(), want.size());
  auto [err, tol] = Compare(got, want);
  std::printf("[hf] %s: max |logit err| %.3g, tol %.3g\n", GetParam().c_str(), err, tol);
  EXPECT_LE(err, tol);

  // Through the .moe container: the same logits, bit for bit.
  const fs::path moe = TempDir("roundtrip_" + GetParam()) / "m.moe";
  ASSERT_TRUE(WriteMoeFile(*spec, moe.string()).ok());
  auto reread = ReadMoeFile(moe.string());
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_EQ(RunAll(*reread, ids), got);
}

// Largest distance between a converted tensor and the checkpoint's values, in units of what the
// type's rounding allows: per element for float types, per 32-element block for quantized ones.
double WorstRoundingRatio(const TensorSpec& src, const TensorSpec& dst) {
  const int64_t cols = src.shape.back(), rows = src.num_elements() / cols;
  std::vector<float> a(cols), b(cols);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(src.dtype, src.data.data() + r * RowBytes(src.dtype, cols), a.data(), cols);
    DequantizeRow(dst.dtype, dst.data.data() + r * RowBytes(dst.dtype, cols), b.data(), cols);
    for (int64_t i = 0; i < cols; ++i) {
      double amax = 0;  // of the element's 32-block
      for (int64_t j = i / 32 * 32; j < std::min<int64_t>(cols, i / 32 * 32 + 32); ++j) {
        amax = std::max(amax, std::fabs(static_cast<double>(a[j])));
      }
      double allowed;
      switch (dst.dtype) {
        case DType::kF16:
          allowed = std::fabs(a[i]) * 0x1p-11 + 0x1p-24;
          break;
        case DType::kBF16:
          allowed = std::fabs(a[i]) * 0x1p-8;
          break;
        case DType::kQ8_0:
          allowed = amax / 127;
          break;  // half a step, plus the F16 scale
        case DType::kQ4_0:
          allowed = amax / 8;
          break;
        default:
          allowed = 0;
      }
      const double err = std::fabs(static_cast<double>(a[i]) - b[i]);
      if (err > 0) worst = std::max(worst, allowed > 0 ? err / allowed : INFINITY);
    }
  }
  return worst;
}

TEST_P(FixtureTest, ConvertsToEveryRequestedType) {
  const fs::path dir = FixtureDir(GetParam());
  const std::vector<int32_t> ids = ReadIds(dir / "tokens.txt");
  const std::vector<float> want = ReadFloats(dir / "logits.f32");
  auto source = ImportHfCheckpoint(dir.string());
  ASSERT_TRUE(source.ok()) << source.status();
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    auto spec = ImportHfCheckpoint(dir.string(), t);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const bool quantized = t == DType::kQ8_0 || t == DType::kQ4_0;
    EXPECT_EQ(spec->Find("blk.0.ffn_up.1.weight")->dtype, t);
    EXPECT_EQ(spec->Find("blk.0.attn_q.weight")->dtype, t);
    EXPECT_EQ(spec->Find("blk.0.attn_norm.weight")->dtype, DType::kF32);
    EXPECT_EQ(spec->Find("blk.0.ffn_gate_inp.weight")->dtype, quantized ? DType::kF32 : t);
    ASSERT_EQ(spec->tensors.size(), source->tensors.size());
    for (const TensorSpec& src : source->tensors) {
      const TensorSpec* dst = spec->Find(src.name);
      ASSERT_NE(dst, nullptr) << src.name;
      EXPECT_LE(WorstRoundingRatio(src, *dst), 1.0) << src.name;
    }
    std::vector<float> got = RunAll(*spec, ids);
    ASSERT_EQ(got.size(), want.size());
    if (t == DType::kF32) {  // widening is exact: the reference's logits still hold
      auto [err, tol] = Compare(got, want);
      EXPECT_LE(err, tol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest,
                         ::testing::Values("mixtral", "qwen2_moe", "olmoe", "qwen3_moe"));

// ---------------------------------------------------------------------------------------------
// Errors: each kind names what is wrong.

absl::Status ImportWith(const std::string& name, nlohmann::json config,
                        std::map<std::string, RawTensor> tensors) {
  const fs::path dir = TempDir(name);
  WriteCheckpoint(dir, config, tensors);
  return ImportHfCheckpoint(dir.string()).status();
}

TEST(HfImportErrorTest, MissingTensor) {
  nlohmann::json config = TinyConfig("MixtralForCausalLM");
  auto tensors = TinyTensors(config, 1);
  tensors.erase("model.layers.1.block_sparse_moe.experts.2.w3.weight");
  absl::Status s = ImportWith("missing", config, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("missing tensor 'model.layers.1.block_sparse_moe.experts.2.w3.weight'"));
}

TEST(HfImportErrorTest, ShapeDisagreeingWithConfig) {
  nlohmann::json config = TinyConfig("Qwen3MoeForCausalLM");
  auto tensors = TinyTensors(config, 1);
  tensors["model.layers.0.self_attn.k_norm.weight"] =
      RawTensor{"F32", {32}, std::vector<uint8_t>(128)};
  absl::Status s = ImportWith("shape", config, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("'model.layers.0.self_attn.k_norm.weight' has shape [32] but config.json "
                        "implies [16]"));
}

TEST(HfImportErrorTest, TruncatedSafetensors) {
  const fs::path dir = TempDir("truncated");
  nlohmann::json config = TinyConfig("OlmoeForCausalLM");
  WriteCheckpoint(dir, config, TinyTensors(config, 1));
  const fs::path weights = dir / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) - 100);
  absl::Status s = ImportHfCheckpoint(dir.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.safetensors"));
}

TEST(HfImportErrorTest, UnknownArchitecture) {
  nlohmann::json config = TinyConfig("MixtralForCausalLM");
  config["architectures"] = {"LlamaForCausalLM"};
  absl::Status s = ImportWith("arch", config, TinyTensors(TinyConfig("MixtralForCausalLM"), 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("unsupported architecture 'LlamaForCausalLM'"));
}

TEST(HfImportErrorTest, UnsupportedDtype) {
  nlohmann::json config = TinyConfig("MixtralForCausalLM");
  auto tensors = TinyTensors(config, 1);
  RawTensor& t = tensors["model.norm.weight"];
  t.dtype = "F64";
  t.bytes.resize(t.bytes.size() * 2);
  absl::Status s = ImportWith("dtype", config, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("'model.norm.weight' has dtype F64"));
}

TEST(HfImportErrorTest, UnsupportedRopeScaling) {
  nlohmann::json config = TinyConfig("Qwen2MoeForCausalLM");
  config["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  absl::Status s = ImportWith("rope", config, TinyTensors(config, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("'yarn'"));
}

TEST(HfImportErrorTest, DenseLayersAndMissingConfigKeys) {
  nlohmann::json config = TinyConfig("Qwen2MoeForCausalLM");
  config["mlp_only_layers"] = {0};
  EXPECT_THAT(std::string(ImportWith("dense", config, TinyTensors(config, 1)).message()),
              HasSubstr("mlp_only_layers"));
  config = TinyConfig("OlmoeForCausalLM");
  config.erase("hidden_size");
  EXPECT_THAT(
      std::string(
          ImportWith("nokey", config, TinyTensors(TinyConfig("OlmoeForCausalLM"), 1)).message()),
      HasSubstr("missing 'hidden_size'"));
}

TEST(HfImportErrorTest, NoWeights) {
  const fs::path dir = TempDir("noweights");
  std::ofstream(dir / "config.json") << TinyConfig("MixtralForCausalLM").dump();
  absl::Status s = ImportHfCheckpoint(dir.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no *.safetensors"));
}

TEST(HfImportErrorTest, ShardIndexOutsideTheDirectoryIsRefused) {
  const fs::path dir = TempDir("index");
  nlohmann::json config = TinyConfig("MixtralForCausalLM");
  WriteCheckpoint(dir, config, TinyTensors(config, 1));
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}})";
  absl::Status s = ImportHfCheckpoint(dir.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a plain file name"));
}

// ---------------------------------------------------------------------------------------------
// The safetensors reader on hostile bytes.

std::vector<uint8_t> Bytes(const std::string& header, size_t data_bytes, uint64_t declared = 0) {
  std::vector<uint8_t> b;
  b.reserve(8 + header.size() + data_bytes);
  uint64_t n = declared ? declared : header.size();
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (char c : header) b.push_back(static_cast<uint8_t>(c));
  b.resize(b.size() + data_bytes);
  return b;
}

absl::Status Parse(const std::vector<uint8_t>& b) {
  return SafetensorsFile::FromBytes(b, "test").status();
}

TEST(SafetensorsTest, AcceptsAWellFormedFile) {
  auto b = Bytes(R"({"a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
                 R"("b":{"dtype":"I64","shape":[1],"data_offsets":[12,20]},)"
                 R"("__metadata__":{"format":"pt"}})",
                 20);
  auto f = SafetensorsFile::FromBytes(b, "test");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_NE((*f)->Find("a"), nullptr);
  EXPECT_EQ((*f)->Find("a")->dtype, DType::kF16);
  EXPECT_EQ((*f)->Find("a")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE((*f)->Find("b")->dtype.has_value());  // readable, not computable
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
}

TEST(SafetensorsTest, RejectsEveryInconsistency) {
  struct Case {
    std::vector<uint8_t> bytes;
    absl::StatusCode code;
    const char* says;
  };
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const Case cases[] = {
      {{1, 2, 3}, absl::StatusCode::kDataLoss, "too short"},
      {Bytes("{}", 0, 1ull << 40), absl::StatusCode::kInvalidArgument, "exceeds the 100 MiB"},
      {Bytes("{}", 0, 50), absl::StatusCode::kDataLoss, "runs past the end"},
      {Bytes("{not json", 0), absl::StatusCode::kInvalidArgument,
       "header: not valid JSON: parse error at line 1, column 3"},
      {Bytes("[1]", 0), absl::StatusCode::kInvalidArgument, "header is not a JSON object"},
      {Bytes("{" + ok_entry + "}", 4), absl::StatusCode::kDataLoss, "truncated"},
      {Bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       absl::StatusCode::kInvalidArgument, "needs 12 bytes"},
      {Bytes(R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8),
       absl::StatusCode::kInvalidArgument, "unknown dtype 'Q9'"},
      {Bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       absl::StatusCode::kInvalidArgument, "sane dimension"},
      {Bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
       absl::StatusCode::kInvalidArgument, "begin <= end"},
      {Bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             12),
       absl::StatusCode::kInvalidArgument, "overlap"},
      {Bytes(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],)"
             R"("data_offsets":[0,8]}})",
             8),
       absl::StatusCode::kInvalidArgument, "shape"},
      {Bytes(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), absl::StatusCode::kInvalidArgument,
       "dtype"},
  };
  for (const Case& c : cases) {
    absl::Status s = Parse(c.bytes);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace moe
