// DeepSeek files in the layout of llama.cpp's converters before the absorbed one (attn_kv_b
// whole, per-head sizes in key_length / value_length) load and run as the current layout does.
// The legacy files are made here from the fixtures, by joining attn_k_b and attn_v_b back into
// attn_kv_b as those converters stored kv_b_proj.
#include "lib/import/legacy_latent_kv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_import.h"
#include "lib/import/gguf_writer.h"
#include "lib/model/model.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/fixture_reference.h"
#include "tests/support/gguf_tensor.h"
#include "tests/support/test_files.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

using ::moe::testing::FixtureDir;
using ::moe::testing::FixtureGgufNamed;

fs::path TempFile(const std::string& what) {
  return ::moe::testing::TempFilePath("legacy_latent_kv_test_" + what + ".gguf");
}

std::vector<float> Values(const TensorSpec& t) {
  const int64_t cols = t.shape.back(), rows = t.num_elements() / cols;
  std::vector<float> out(t.num_elements());
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t.dtype, t.data.data() + r * RowBytes(t.dtype, cols), out.data() + r * cols,
                  cols);
  }
  return out;
}

std::vector<float> Values(const GgufTensorInfo& t) {
  return Values(*::moe::testing::FileTensor(t));
}

struct LegacyOptions {
  DType kv_b_type = DType::kF32;
  int64_t key_length_change = 0;  // states a wrong per-head key size
  bool with_value_length = true;
};

// `src` (a DeepSeek GGUF in the absorbed layout) as an older converter wrote it: no *_mla keys,
// key_length / value_length per head, head_count_kv = head_count, and per layer one attn_kv_b
// [heads x (nope + v), kv_lora_rank] with attn_kv_b[h (nope + v) + j][c] = attn_k_b[h][c][j] and
// attn_kv_b[h (nope + v) + nope + i][c] = attn_v_b[h][i][c].
absl::Status WriteLegacyLayout(const fs::path& src, const fs::path& dst,
                               const LegacyOptions& o = {}) {
  MOE_ASSIGN_OR_RETURN(auto g, GgufFile::Open(src.string()));
  const std::string a = "deepseek2.attention.";
  MOE_ASSIGN_OR_RETURN(const uint64_t heads, g->GetUint(a + "head_count"));
  MOE_ASSIGN_OR_RETURN(const uint64_t rank, g->GetUint(a + "kv_lora_rank"));
  MOE_ASSIGN_OR_RETURN(const uint64_t k_mla, g->GetUint(a + "key_length_mla"));
  MOE_ASSIGN_OR_RETURN(const uint64_t v, g->GetUint(a + "value_length_mla"));
  MOE_ASSIGN_OR_RETURN(const uint64_t rope, g->GetUint("deepseek2.rope.dimension_count"));
  const int64_t nope = k_mla - rope;
  GgufWriter w;
  CopyMetadata(*g, w, [&](const std::string& key) {
    return !absl::StartsWith(key, a + "key_length") && !absl::StartsWith(key, a + "value_length");
  });
  w.SetU32(a + "key_length", k_mla + o.key_length_change);
  if (o.with_value_length) w.SetU32(a + "value_length", v);
  w.SetU32(a + "head_count_kv", heads);
  std::deque<std::vector<uint8_t>> joined;  // outlives Write; a deque never moves its elements
  for (const GgufTensorInfo& t : g->tensors()) {
    if (absl::EndsWith(t.name, "attn_v_b.weight")) continue;
    if (!absl::EndsWith(t.name, "attn_k_b.weight")) {
      MOE_ASSIGN_OR_RETURN(const TensorSpec copy, ::moe::testing::FileTensor(t));
      w.AddTensor(copy.name, copy.dtype, copy.shape, copy.data);
      continue;
    }
    const std::string layer = t.name.substr(0, t.name.size() - std::strlen("attn_k_b.weight"));
    const GgufTensorInfo* v_b = g->FindTensor(layer + "attn_v_b.weight");
    if (v_b == nullptr) return absl::NotFoundError(layer + "attn_v_b.weight");
    const std::vector<float> k = Values(t), val = Values(*v_b);
    const int64_t rows = heads * (nope + v);
    std::vector<float> kv(rows * rank);
    for (uint64_t h = 0; h < heads; ++h) {
      for (uint64_t c = 0; c < rank; ++c) {
        for (int64_t j = 0; j < nope; ++j) {
          kv[(h * (nope + v) + j) * rank + c] = k[(h * rank + c) * nope + j];
        }
        for (uint64_t i = 0; i < v; ++i) {
          kv[(h * (nope + v) + nope + i) * rank + c] = val[(h * v + i) * rank + c];
        }
      }
    }
    const size_t row = RowBytes(o.kv_b_type, rank);
    std::vector<uint8_t>& bytes = joined.emplace_back(rows * row);
    for (int64_t r = 0; r < rows; ++r) {
      MOE_RETURN_IF_ERROR(
          QuantizeRow(o.kv_b_type, kv.data() + r * rank, bytes.data() + r * row, rank));
    }
    w.AddTensor(layer + "attn_kv_b.weight", o.kv_b_type, {rows, static_cast<int64_t>(rank)}, bytes);
  }
  return w.Write(dst.string());
}

class LegacyLayoutTest : public ::testing::TestWithParam<std::string> {};

// F32 attn_kv_b holds the fixture's key and value weights exactly: the split gives them back
// value for value, the hyper-parameters equal the current file's, and the model reproduces
// llama.cpp's logits and greedy tokens (on the dequantized weights for the Q8_0 fixture).
TEST_P(LegacyLayoutTest, RunsAsTheAbsorbedLayoutDoes) {
  const std::string name = GetParam();
  const fs::path legacy = TempFile(name);
  ASSERT_TRUE(WriteLegacyLayout(FixtureGgufNamed(name), legacy).ok());
  auto current = ImportGguf(FixtureGgufNamed(name));
  auto old = ImportGguf(legacy.string());
  fs::remove(legacy);
  ASSERT_TRUE(current.ok()) << current.status();
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->hp == current->hp);
  EXPECT_EQ(old->Find("blk.0.attn_kv_b.weight"), nullptr);
  for (int l = 0; l < current->hp.n_layer; ++l) {
    for (const char* base : {"attn_k_b", "attn_v_b"}) {
      SCOPED_TRACE(LayerTensorName(l, base));
      const TensorSpec* want = current->Find(LayerTensorName(l, base));
      const TensorSpec* got = old->Find(LayerTensorName(l, base));
      ASSERT_NE(want, nullptr);
      ASSERT_NE(got, nullptr);
      EXPECT_EQ(got->dtype, DType::kF32);
      EXPECT_EQ(got->shape, want->shape);
      EXPECT_EQ(Values(*got), Values(*want));
    }
  }
  auto model = Model::Create(*std::move(old));
  ASSERT_TRUE(model.ok()) << model.status();
  const bool quantized = fs::exists(FixtureDir(name) / "p1.deq.gen_tokens.txt");
  ::moe::testing::CheckAgainstFixture(FixtureDir(name), *model,
                                      quantized
                                          ? ::moe::testing::FixtureReference{".deq", false, true}
                                          : ::moe::testing::FixtureReference{"", true, true},
                                      2);
}

INSTANTIATE_TEST_SUITE_P(DeepseekFixtures, LegacyLayoutTest,
                         ::testing::Values("tiny-deepseek2lite-f32", "tiny-deepseek3-f32",
                                           "tiny-deepseek3-q8_0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// A quantized attn_kv_b: attn_v_b keeps its type and bytes, attn_k_b becomes Q8_0, each value
// within Q8_0's rounding of attn_kv_b's.
TEST(LegacyLatentKvTest, QuantizedKvBGivesQ8_0Keys) {
  const fs::path legacy = TempFile("q4_0");
  ASSERT_TRUE(
      WriteLegacyLayout(FixtureGgufNamed("tiny-deepseek3-f32"), legacy, {.kv_b_type = DType::kQ4_0})
          .ok());
  auto file = GgufFile::Open(legacy.string());
  ASSERT_TRUE(file.ok()) << file.status();
  auto spec = ImportGguf(legacy.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const HParams& h = spec->hp;
  const int64_t rank = h.kv_lora_rank, nope = h.qk_nope_dim, v = h.v_head_dim;
  const size_t src_row = RowBytes(DType::kQ4_0, rank);
  for (int l = 0; l < h.n_layer; ++l) {
    SCOPED_TRACE(l);
    const GgufTensorInfo* kv_b = (*file)->FindTensor(LayerTensorName(l, "attn_kv_b"));
    const TensorSpec* k_b = spec->Find(LayerTensorName(l, "attn_k_b"));
    const TensorSpec* v_b = spec->Find(LayerTensorName(l, "attn_v_b"));
    ASSERT_NE(kv_b, nullptr);
    ASSERT_NE(k_b, nullptr);
    ASSERT_NE(v_b, nullptr);
    ASSERT_EQ(v_b->dtype, DType::kQ4_0);
    ASSERT_EQ(k_b->dtype, DType::kQ8_0);
    const std::vector<float> kv = Values(*kv_b), keys = Values(*k_b);
    for (int64_t head = 0; head < h.n_head; ++head) {
      for (int64_t i = 0; i < v; ++i) {
        const int64_t row = head * (nope + v) + nope + i;
        ASSERT_EQ(std::memcmp(v_b->data.data() + (head * v + i) * src_row,
                              kv_b->data.data() + row * src_row, src_row),
                  0);
      }
      for (int64_t c = 0; c < rank; ++c) {
        for (int64_t j0 = 0; j0 < nope; j0 += 32) {  // one Q8_0 block of the key row
          float amax = 0;
          for (int64_t j = j0; j < j0 + 32; ++j) {
            amax = std::max(amax, std::fabs(kv[(head * (nope + v) + j) * rank + c]));
          }
          // Half a step of amax / 127, plus up to 127 steps' worth of the step's own rounding
          // to F16 (relative 2^-11), since Q8_0 keeps its scale as F16.
          const float tolerance = amax / 127 * (0.5f + 127 * 0x1p-11f) + 1e-7f;
          for (int64_t j = j0; j < j0 + 32; ++j) {
            EXPECT_NEAR(keys[(head * rank + c) * nope + j], kv[(head * (nope + v) + j) * rank + c],
                        tolerance);
          }
        }
      }
    }
  }
  fs::remove(legacy);
  auto model = Model::Create(*std::move(spec));
  EXPECT_TRUE(model.ok()) << model.status();
}

TEST(LegacyLatentKvTest, KeyTypes) {
  EXPECT_EQ(LegacyKeyType(DType::kF32, 24), DType::kF32);
  EXPECT_EQ(LegacyKeyType(DType::kF16, 128), DType::kF16);
  EXPECT_EQ(LegacyKeyType(DType::kBF16, 128), DType::kBF16);
  EXPECT_EQ(LegacyKeyType(DType::kQ4_K, 128), DType::kQ8_0);
  EXPECT_EQ(LegacyKeyType(DType::kQ8_0, 24), DType::kF32);
}

// Sizes that do not fit the tensor, or are not stated, are errors that say so.
TEST(LegacyLatentKvTest, WrongOrMissingSizesAreErrors) {
  const fs::path wrong = TempFile("wrong");
  ASSERT_TRUE(
      WriteLegacyLayout(FixtureGgufNamed("tiny-deepseek3-f32"), wrong, {.key_length_change = 8})
          .ok());
  auto s = ImportGguf(wrong.string());
  fs::remove(wrong);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "attn_kv_b")) << s.status();

  const fs::path unstated = TempFile("unstated");
  ASSERT_TRUE(WriteLegacyLayout(FixtureGgufNamed("tiny-deepseek2lite-f32"), unstated,
                                {.with_value_length = false})
                  .ok());
  s = ImportGguf(unstated.string());
  fs::remove(unstated);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "value_length")) << s.status();
}

}  // namespace
}  // namespace moe
