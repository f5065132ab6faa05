// Per-expert mixed precision: the sensitivity measured on calibration rows, the choice of types
// within a byte budget, and moe-quantize --policy mixed writing a .moe that runs.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/format/moe_reader.h"
#include "lib/import/model_loader.h"
#include "lib/runtime/engine.h"
#include "tools/moe-quantize/expert_sensitivity.h"
#include "tools/moe-quantize/spec_reencoder.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

const std::string kGguf =
    std::string(MOE_TESTDATA_DIR) + "/fixtures/tiny-qwen2moe-f32/tiny-qwen2moe-f32.gguf";

using Options = std::vector<std::vector<std::vector<TypeOption>>>;

size_t BytesOf(const Options& o, const std::vector<std::vector<int>>& chosen, double* error) {
  size_t bytes = 0;
  *error = 0;
  for (size_t l = 0; l < o.size(); ++l) {
    for (size_t e = 0; e < o[l].size(); ++e) {
      if (chosen[l][e] < 0) continue;
      bytes += o[l][e][chosen[l][e]].bytes;
      *error += o[l][e][chosen[l][e]].error;
    }
  }
  return bytes;
}

// Two experts alike but for how often they are routed (errors scale with it), and one whose
// options are not in byte order, with a dominated one.
Options ThreeExperts() {
  auto expert = [](double scale) {
    return std::vector<TypeOption>{{DType::kQ4_0, 45, 8.0 * scale},
                                   {DType::kQ5_K, 55, 3.0 * scale},
                                   {DType::kQ8_0, 85, 0.5 * scale}};
  };
  Options o(2);
  o[0] = {expert(10), expert(1)};
  o[1] = {{{DType::kQ8_0, 85, 0.1},
           {DType::kQ4_K, 45, 5.0},
           {DType::kQ4_0, 45, 6.0},
           {DType::kQ6_K, 66, 0.2}}};
  return o;
}

TEST(ChooseTypesTest, StaysWithinTheBudgetAndSpendsItWhereTheErrorIs) {
  const Options o = ThreeExperts();
  double last_error = 1e30;
  for (size_t budget = 135; budget <= 300; budget += 5) {
    auto chosen = ChooseTypes(o, budget);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    double error = 0;
    EXPECT_LE(BytesOf(o, *chosen, &error), budget);
    EXPECT_LE(error, last_error) << "more bytes never cost accuracy";
    last_error = error;
    // The often-routed expert is never below the rarely routed one.
    EXPECT_GE(o[0][0][(*chosen)[0][0]].bytes, o[0][1][(*chosen)[0][1]].bytes) << budget;
    // Of two options with equal bytes, the better one.
    EXPECT_NE((*chosen)[1][0], 2);
  }
  // Enough for everything: the best of each.
  auto all = ChooseTypes(o, 1000);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)[0][0], 2);
  EXPECT_EQ((*all)[1][0], 0);
  // Less than the cheapest: an error that says how much is needed.
  auto short_budget = ChooseTypes(o, 100);
  EXPECT_EQ(short_budget.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_budget.status().message().find("135"), std::string::npos)
      << short_budget.status();
}

// On small cases the choice matches the best of all combinations at the hull's budgets.
TEST(ChooseTypesTest, MatchesExhaustiveSearchOnSmallCases) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Options o(1);
    double largest_step = 0;  // the biggest error drop of one step of one expert
    for (int e = 0; e < 3; ++e) {
      const double scale = 1 + rng() % 100;
      largest_step = std::max(largest_step, 5 * scale);
      o[0].push_back({{DType::kQ4_0, 45, 8 * scale},
                      {DType::kQ5_K, 55, 3 * scale},
                      {DType::kQ6_K, 66, 1.2 * scale},
                      {DType::kQ8_0, 85, 0.3 * scale}});
    }
    for (size_t budget : {135u, 145u, 155u, 165u, 176u, 187u, 198u, 218u, 238u, 255u}) {
      double best = 1e30;
      for (int a = 0; a < 4; ++a) {
        for (int b = 0; b < 4; ++b) {
          for (int c = 0; c < 4; ++c) {
            double err = 0;
            const size_t bytes = BytesOf(o, {{a, b, c}}, &err);
            if (bytes <= budget) best = std::min(best, err);
          }
        }
      }
      auto chosen = ChooseTypes(o, budget);
      ASSERT_TRUE(chosen.ok());
      double err = 0;
      EXPECT_LE(BytesOf(o, *chosen, &err), budget);
      // Greedy along convex hulls is optimal up to one step of one expert.
      EXPECT_LE(err, best + largest_step) << "trial " << trial << " budget " << budget;
    }
  }
}

TEST(ExpertSensitivityTest, MoreBitsLessErrorAndRoutingWeighsIt) {
  auto spec = LoadModelSpec(kGguf);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto engine = Engine::FromSpec(*spec);
  ASSERT_TRUE(engine.ok());
  const HParams& h = (*engine)->model()->hp();
  std::vector<int32_t> tokens;
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) tokens.push_back(3 + static_cast<int32_t>(rng() % (h.n_vocab - 3)));
  auto cal = Calibrate((*engine)->model(), tokens, 100, 32, 2);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_EQ(cal->tokens, 300);
  int64_t routed = 0;
  for (const ExpertSamples& s : cal->experts[0]) {
    routed += s.routed;
    EXPECT_LE(s.weights.size(), 32u);
    EXPECT_EQ(s.inputs.size(), s.weights.size() * h.n_embd);
  }
  EXPECT_EQ(routed, 300 * h.n_expert_used);

  auto backend = CreateCpuBackend(2);
  const DType candidates[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kF32};
  auto options = MeasureSensitivity(*(*engine)->model(), *cal, candidates, nullptr, *backend);
  ASSERT_TRUE(options.ok()) << options.status();
  for (int l = 0; l < h.n_layer; ++l) {
    for (int e = 0; e < h.n_expert; ++e) {
      const auto& opts = (*options)[l][e];
      ASSERT_EQ(opts.size(), 3u) << "Q4_K's 256-value blocks do not fit rows of 64";
      EXPECT_EQ(opts[0].type, DType::kQ8_0);
      EXPECT_EQ(opts[2].type, DType::kF32);
      EXPECT_EQ(opts[2].error, 0.0) << "the model's own values";
      if (cal->experts[l][e].routed == 0) continue;
      EXPECT_GT(opts[1].error, opts[0].error) << "Q4_0 loses more than Q8_0";
      EXPECT_GT(opts[0].error, 0.0);
      EXPECT_LT(opts[0].bytes, opts[2].bytes);
    }
  }
  // A routing profile's counts weigh the errors instead: doubled counts, doubled errors.
  std::vector<std::vector<int64_t>> doubled(h.n_layer, std::vector<int64_t>(h.n_expert, 0));
  for (int l = 0; l < h.n_layer; ++l) {
    for (int e = 0; e < h.n_expert; ++e) doubled[l][e] = 2 * cal->experts[l][e].routed;
  }
  auto weighted = MeasureSensitivity(*(*engine)->model(), *cal, candidates, &doubled, *backend);
  ASSERT_TRUE(weighted.ok());
  EXPECT_DOUBLE_EQ((*weighted)[0][0][1].error, 2 * (*options)[0][0][1].error);
}

struct CommandResult {
  int code;
  std::string out;
};
CommandResult Command(const std::string& cmd) {
  CommandResult r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  r.code = pclose(p);
  return r;
}

TEST(MoeQuantizeMixedTest, WritesPerExpertTypesWithinTheTargetThatRun) {
  const std::string bin = std::string(MOE_BINARY_DIR) + "/tools/moe-quantize";
  const std::string base = ::testing::TempDir() + "/mixed_" + std::to_string(::getpid());
  const std::string text = base + ".txt", out = base + ".moe", uniform = base + "_q4_0.moe";
  {
    FILE* f = std::fopen(text.c_str(), "w");
    ASSERT_NE(f, nullptr);
    for (int i = 0; i < 20; ++i) {
      std::fputs(
          "The experts of a mixture each see the tokens routed to them, some many, "
          "some few; the quantizer spends its bits where the error is. ",
          f);
    }
    std::fclose(f);
  }
  CommandResult mixed =
      Command(bin + " " + kGguf + " " + out +
              " --policy mixed --target-bits 6 --candidates q8_0,q4_0,mxfp4 --calib " + text);
  ASSERT_EQ(mixed.code, 0) << mixed.out;
  EXPECT_NE(mixed.out.find("bits per weight (target 6"), std::string::npos) << mixed.out;
  auto spec = ReadMoeFile(out);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::set<DType> expert_types;
  size_t expert_bytes = 0;
  int64_t expert_params = 0;
  for (const TensorSpec& t : spec->tensors) {
    if (t.expert < 0) continue;
    expert_types.insert(t.dtype);
    expert_bytes += t.byte_size();
    expert_params += t.num_elements();
  }
  EXPECT_GE(expert_types.size(), 2u) << "a mix at 6 bits between 4.25 and 8.5";
  EXPECT_LE(8.0 * expert_bytes / expert_params, 6.0);
  EXPECT_EQ(spec->Find("blk.0.attn_q.weight")->dtype, DType::kQ8_0) << "--base q8_0";
  EXPECT_EQ(spec->Find("blk.0.ffn_gate_inp.weight")->dtype, DType::kF32) << "routers stay F32";
  auto engine = Engine::Load(out, {});
  ASSERT_TRUE(engine.ok()) << engine.status();

  // One scheme into .moe, from any input; and the refusals.
  CommandResult q4 = Command(bin + " " + kGguf + " " + uniform + " q4_0");
  ASSERT_EQ(q4.code, 0) << q4.out;
  auto q4_spec = ReadMoeFile(uniform);
  ASSERT_TRUE(q4_spec.ok());
  EXPECT_EQ(q4_spec->Find(ExpertTensorName(1, 3, "ffn_up"))->dtype, DType::kQ4_0);
  EXPECT_NE(
      Command(bin + " " + kGguf + " " + out + " --policy mixed --target-bits 2 --calib " + text)
          .code,
      0);
  EXPECT_NE(Command(bin + " " + kGguf + " " + base +
                    ".gguf --policy mixed --target-bits 5 "
                    "--calib " +
                    text)
                .code,
            0);
  EXPECT_NE(Command(bin + " " + kGguf + " " + out + " --policy mixed --target-bits 5").code, 0);
  for (const auto& f : {text, out, uniform}) fs::remove(f);
}

}  // namespace
}  // namespace moe
