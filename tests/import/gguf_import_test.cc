// GGUF import of layouts the fixtures do not carry: gate and up experts fused into one stacked
// tensor (ffn_gate_up_exps, as newer llama.cpp converters may write it), and q/k/v fused into one
// attn_qkv (Ling 2.0's), load as the separate tensors do.
#include "lib/import/gguf_import.h"

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_writer.h"
#include "lib/model/model.h"
#include "tests/support/expert_cache_logits.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/fixture_reference.h"
#include "tests/support/gguf_tensor.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

using ::moe::testing::FixtureDir;
using ::moe::testing::FixtureGgufNamed;

// `src` with each layer's ffn_gate_exps and ffn_up_exps [n_expert, ff, d] written as one
// ffn_gate_up_exps [n_expert, 2 ff (+ extra_rows), d], each expert's gate rows first.
absl::Status WriteFusedExperts(const fs::path& src, const fs::path& dst, int extra_rows = 0) {
  MOE_ASSIGN_OR_RETURN(auto g, GgufFile::Open(src.string()));
  GgufWriter w;
  CopyMetadata(*g, w, [](const std::string&) { return true; });
  std::deque<std::vector<uint8_t>> fused;  // outlives Write; a deque never moves its elements
  for (const GgufTensorInfo& info : g->tensors()) {
    MOE_ASSIGN_OR_RETURN(const TensorSpec t, ::moe::testing::FileTensor(info));
    if (absl::EndsWith(t.name, "ffn_up_exps.weight")) continue;
    if (!absl::EndsWith(t.name, "ffn_gate_exps.weight")) {
      w.AddTensor(t.name, t.dtype, t.shape, t.data);
      continue;
    }
    const std::string layer = t.name.substr(0, t.name.size() - std::strlen("ffn_gate_exps.weight"));
    const GgufTensorInfo* up_info = g->FindTensor(layer + "ffn_up_exps.weight");
    if (up_info == nullptr) return absl::NotFoundError(layer + "ffn_up_exps.weight");
    MOE_ASSIGN_OR_RETURN(const TensorSpec up, ::moe::testing::FileTensor(*up_info));
    const std::vector<int64_t>& shape = t.shape;
    const int64_t n_expert = shape[0];
    const size_t slab = t.data.size() / n_expert, row = slab / shape[1];
    std::vector<uint8_t>& bytes = fused.emplace_back();
    for (int64_t e = 0; e < n_expert; ++e) {
      bytes.insert(bytes.end(), t.data.begin() + e * slab, t.data.begin() + (e + 1) * slab);
      bytes.insert(bytes.end(), up.data.begin() + e * slab, up.data.begin() + (e + 1) * slab);
      bytes.insert(bytes.end(), extra_rows * row, 0);
    }
    w.AddTensor(layer + "ffn_gate_up_exps.weight", t.dtype,
                {n_expert, 2 * shape[1] + extra_rows, shape[2]}, bytes);
  }
  return w.Write(dst.string());
}

// `src` with its metadata edited by `edit` (after every key is copied), tensors as they are.
absl::Status WriteWithKeys(const fs::path& src, const fs::path& dst,
                           const std::function<void(GgufWriter&)>& edit) {
  MOE_ASSIGN_OR_RETURN(auto g, GgufFile::Open(src.string()));
  GgufWriter w;
  CopyMetadata(*g, w, [](const std::string&) { return true; });
  edit(w);
  for (const GgufTensorInfo& info : g->tensors()) {
    MOE_ASSIGN_OR_RETURN(const TensorSpec t, ::moe::testing::FileTensor(info));
    w.AddTensor(t.name, t.dtype, t.shape, t.data);
  }
  return w.Write(dst.string());
}

fs::path TempFile(const std::string& what) {
  return ::moe::testing::TempFilePath("gguf_import_test_" + what + ".gguf");
}

// A rewritten fixture file's import holds the original's tensors, byte for byte, and runs as
// llama.cpp ran the original (the dequantized reference for quantized fixtures, and with 8-bit
// activations when `quantized_too`).
void ExpectSameModelAsTheFixture(const std::string& name, const fs::path& rewritten,
                                 bool quantized_too) {
  auto separate = ImportGguf(FixtureGgufNamed(name));
  auto fused = ImportGguf(rewritten.string());
  ASSERT_TRUE(separate.ok()) << separate.status();
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_TRUE(fused->hp == separate->hp);
  ASSERT_EQ(fused->tensors.size(), separate->tensors.size());
  for (const TensorSpec& want : separate->tensors) {
    const TensorSpec* got = fused->Find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->shape, want.shape) << want.name;
    EXPECT_EQ(got->dtype, want.dtype) << want.name;
    EXPECT_EQ(got->expert, want.expert) << want.name;
    ASSERT_EQ(got->data.size(), want.data.size()) << want.name;
    EXPECT_EQ(std::memcmp(got->data.data(), want.data.data(), want.data.size()), 0) << want.name;
  }
  auto model = Model::Create(*std::move(fused));
  ASSERT_TRUE(model.ok()) << model.status();
  const bool quantized = fs::exists(FixtureDir(name) / "p1.deq.gen_tokens.txt");
  if (quantized) {
    ::moe::testing::CheckAgainstFixture(FixtureDir(name), *model, {".deq", false, true}, 2);
    if (quantized_too) {
      ::moe::testing::CheckAgainstFixture(FixtureDir(name), *model, {"", true, false}, 2);
    }
  } else {
    ::moe::testing::CheckAgainstFixture(FixtureDir(name), *model, {"", true, true}, 2);
  }
}

TEST(GgufImportTest, FusedGateUpExpertsLoadAsSeparateOnes) {
  for (const std::string name : {"tiny-deepseek3-q8_0", "tiny-qwen3moe-f32"}) {
    SCOPED_TRACE(name);
    const fs::path path = TempFile(name);
    ASSERT_TRUE(WriteFusedExperts(FixtureGgufNamed(name), path).ok());
    ExpectSameModelAsTheFixture(name, path, /*quantized_too=*/true);
    fs::remove(path);
  }
}

// The expert cache reads a fused file's gate and up halves from where they lie in it: every
// prompt position's logits equal the separate file's, resident, with a quarter of the experts
// cached.
TEST(GgufImportTest, FusedGateUpExpertsServeTheExpertCache) {
  const std::string name = "tiny-qwen3moe-f32";
  const fs::path path = TempFile("cache");
  ASSERT_TRUE(WriteFusedExperts(FixtureGgufNamed(name), path).ok());
  const std::vector<float> want =
      ::moe::testing::FixturePromptLogits(FixtureGgufNamed(name), name, 0);
  const std::vector<float> got = ::moe::testing::FixturePromptLogits(path.string(), name, 0.25);
  fs::remove(path);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want);
}

TEST(GgufImportTest, FusedExpertsOfAnOddRowCountAreAnError) {
  const fs::path path = TempFile("odd");
  ASSERT_TRUE(WriteFusedExperts(FixtureGgufNamed("tiny-qwen3moe-f32"), path, 1).ok());
  auto spec = ImportGguf(path.string());
  fs::remove(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_TRUE(absl::StrContains(spec.status().message(), "ffn_gate_up_exps")) << spec.status();
}

// `src` with each layer's attn_q, attn_k and attn_v (weights, and biases where it has them)
// written as one attn_qkv, the q rows first, then k's and v's (+ extra_rows), as llama.cpp's
// converters write Ling 2.0's and other fused-attention families'.
absl::Status WriteFusedQkv(const fs::path& src, const fs::path& dst, int extra_rows = 0) {
  MOE_ASSIGN_OR_RETURN(auto g, GgufFile::Open(src.string()));
  GgufWriter w;
  CopyMetadata(*g, w, [](const std::string&) { return true; });
  std::deque<std::vector<uint8_t>> fused;  // outlives Write
  for (const GgufTensorInfo& info : g->tensors()) {
    MOE_ASSIGN_OR_RETURN(const TensorSpec t, ::moe::testing::FileTensor(info));
    const size_t at = t.name.find(".attn_q.");
    if (t.name.find(".attn_k.") != std::string::npos ||
        t.name.find(".attn_v.") != std::string::npos) {
      continue;
    }
    if (at == std::string::npos) {
      w.AddTensor(t.name, t.dtype, t.shape, t.data);
      continue;
    }
    const std::string prefix = t.name.substr(0, at), suffix = t.name.substr(at + 7);
    std::vector<uint8_t>& bytes = fused.emplace_back(t.data.begin(), t.data.end());
    std::vector<int64_t> shape = t.shape;
    for (const char* part : {".attn_k", ".attn_v"}) {
      const GgufTensorInfo* other = g->FindTensor(prefix + part + suffix);
      if (other == nullptr) return absl::NotFoundError(prefix + part + suffix);
      MOE_ASSIGN_OR_RETURN(const TensorSpec o, ::moe::testing::FileTensor(*other));
      bytes.insert(bytes.end(), o.data.begin(), o.data.end());
      shape[0] += o.shape[0];
    }
    bytes.insert(bytes.end(), extra_rows * (t.data.size() / t.shape[0]), 0);
    shape[0] += extra_rows;
    w.AddTensor(prefix + ".attn_qkv" + suffix, t.dtype, shape, bytes);
  }
  return w.Write(dst.string());
}

// A fused attn_qkv loads as the three tensors it holds, zero copy, and runs as llama.cpp ran the
// separate ones: quantized rows (Q8_0), and the biases fused alike (Qwen2-MoE's).
TEST(GgufImportTest, FusedQkvLoadsAsSeparateProjections) {
  for (const std::string name : {"tiny-llama-moe-q8_0", "tiny-qwen2moe-f32"}) {
    SCOPED_TRACE(name);
    const fs::path path = TempFile(name + "_qkv");
    ASSERT_TRUE(WriteFusedQkv(FixtureGgufNamed(name), path).ok());
    ExpectSameModelAsTheFixture(name, path, /*quantized_too=*/false);
    fs::remove(path);
  }
  // Rows that are not q + k + v of the file's heads are an error naming the tensor.
  const fs::path path = TempFile("qkv_extra");
  ASSERT_TRUE(WriteFusedQkv(FixtureGgufNamed("tiny-qwen2moe-f32"), path, 1).ok());
  auto spec = ImportGguf(path.string());
  fs::remove(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_TRUE(absl::StrContains(spec.status().message(), "attn_qkv")) << spec.status();
}

// Metadata whose meaning libmoe does not implement is refused, never run as if absent.
absl::Status ImportWithKeys(const std::string& fixture,
                            const std::function<void(GgufWriter&)>& edit) {
  const fs::path path = TempFile("keys");
  MOE_RETURN_IF_ERROR(WriteWithKeys(FixtureGgufNamed(fixture), path, edit));
  auto spec = ImportGguf(path.string());
  fs::remove(path);
  return spec.status();
}

// A cut file's error names it once: the GGUF reader says which file it read, and the importer
// does not say it again ("reading 'x': reading 'x': ...").
TEST(GgufImportTest, ATruncatedFileIsAnErrorNamingItOnce) {
  const std::string bytes = testing::ReadFileBytes(FixtureGgufNamed("tiny-qwen3moe-f32"));
  const std::string path = testing::TempFilePath("truncated.gguf").string();
  for (const size_t cut : {size_t{1000}, bytes.size() / 2}) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(cut));
    }
    const absl::Status s = ImportGguf(path).status();
    ASSERT_FALSE(s.ok()) << "cut at " << cut;
    const std::string named = absl::StrCat("'", path, "'");
    const size_t first = s.message().find(named);
    ASSERT_NE(first, std::string::npos) << s;
    EXPECT_EQ(s.message().find(named, first + 1), std::string::npos) << s;
  }
  fs::remove(path);
  // A split key of the wrong type: named once too (the split reader annotates it).
  const absl::Status s =
      ImportWithKeys("tiny-qwen3moe-f32", [](GgufWriter& w) { w.SetString("split.count", "two"); });
  ASSERT_FALSE(s.ok());
  const std::string named = absl::StrCat("'", TempFile("keys").string(), "'");
  const size_t first = s.message().find(named);
  ASSERT_NE(first, std::string::npos) << s;
  EXPECT_EQ(s.message().find(named, first + 1), std::string::npos) << s;
}

TEST(GgufImportTest, LinearRopeScalingIsRefused) {
  const std::string a = "qwen3moe.rope.";
  // llama.cpp reads a factor without a type as linear scaling.
  absl::Status s = ImportWithKeys("tiny-qwen3moe-f32",
                                  [&](GgufWriter& w) { w.SetF32(a + "scaling.factor", 4.f); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "linear RoPE scaling (factor 4")) << s;
  s = ImportWithKeys("tiny-qwen3moe-f32",
                     [&](GgufWriter& w) { w.SetF32(a + "scale_linear", 2.f); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  s = ImportWithKeys("tiny-qwen3moe-f32", [&](GgufWriter& w) {
    w.SetString(a + "scaling.type", "linear");
    w.SetF32(a + "scaling.factor", 8.f);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  // What scales nothing loads: type none whatever the factor, a factor of 1, no factor.
  EXPECT_TRUE(ImportWithKeys("tiny-qwen3moe-f32", [&](GgufWriter& w) {
                w.SetString(a + "scaling.type", "none");
                w.SetF32(a + "scaling.factor", 4.f);
              }).ok());
  EXPECT_TRUE(ImportWithKeys("tiny-qwen3moe-f32", [&](GgufWriter& w) {
                w.SetString(a + "scaling.type", "linear");
                w.SetF32(a + "scaling.factor", 1.f);
              }).ok());
  EXPECT_TRUE(ImportWithKeys("tiny-qwen3moe-f32", [](GgufWriter&) {}).ok());
}

TEST(GgufImportTest, DeepseekAttentionTemperatureIsRefused) {
  absl::Status s = ImportWithKeys("tiny-deepseek3-f32", [](GgufWriter& w) {
    w.SetF32("deepseek2.attention.temperature_scale", 0.1f);
    w.SetU32("deepseek2.attention.temperature_length", 8192);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "temperature_scale")) << s;
}

}  // namespace
}  // namespace moe
