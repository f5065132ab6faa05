// Placement files: what a good one says, and a clear error naming the file and the place for
// every way one can be wrong.
#include "lib/moe/expert_placement.h"

#include <string>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(ExpertPlacementTest, NamedExpertsTakeTheirTierAndTheRestAreCached) {
  auto p = ExpertPlacement::Parse(
      R"({"layers": {"0": {"resident": [3, 1], "pinned": [2]}, "2": {"pinned": [0]}}})", 3, 4,
      "p.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->tier(0, 3), ExpertTier::kResident);
  EXPECT_EQ(p->tier(0, 1), ExpertTier::kResident);
  EXPECT_EQ(p->tier(0, 2), ExpertTier::kPinned);
  EXPECT_EQ(p->tier(0, 0), ExpertTier::kCached);
  EXPECT_EQ(p->tier(1, 0), ExpertTier::kCached);
  EXPECT_EQ(p->tier(2, 0), ExpertTier::kPinned);
  EXPECT_EQ(p->Count(ExpertTier::kResident), 2);
  EXPECT_EQ(p->Count(ExpertTier::kPinned), 2);
  EXPECT_EQ(p->Count(ExpertTier::kCached), 8);
}

TEST(ExpertPlacementTest, AStarMeansEveryLayer) {
  auto p = ExpertPlacement::Parse(R"({"layers": {"*": {"pinned": [1]}}})", 3, 4, "p.json");
  ASSERT_TRUE(p.ok()) << p.status();
  for (int l = 0; l < 3; ++l) EXPECT_EQ(p->tier(l, 1), ExpertTier::kPinned);
  EXPECT_EQ(p->Count(ExpertTier::kPinned), 3);
}

TEST(ExpertPlacementTest, AnEmptyPlacementCachesEverything) {
  auto p = ExpertPlacement::Parse("{}", 2, 2, "p.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Count(ExpertTier::kCached), 4);
}

TEST(ExpertPlacementTest, MalformedFilesAreErrorsThatSayWhere) {
  const struct {
    const char* json;
    const char* says;
  } cases[] = {
      {"{\"layers\": ", "not valid JSON: parse error at line 1, column 12"},
      {"[1, 2]", "not an object"},
      {R"({"layer": {}})", "unknown key \"layer\""},
      {R"({"layers": [1]})", "\"layers\" is not an object"},
      {R"({"layers": {"3": {"pinned": [0]}}})", "layer \"3\" is not a layer index in [0, 3)"},
      {R"({"layers": {"-1": {"pinned": [0]}}})", "layer \"-1\""},
      {R"({"layers": {"x": {"pinned": [0]}}})", "layer \"x\""},
      {R"({"layers": {"0": [1]}})", "not an object of tiers"},
      {R"({"layers": {"0": {"hot": [1]}}})", "unknown tier \"hot\""},
      {R"({"layers": {"0": {"pinned": 1}}})", "not an array of expert indices"},
      {R"({"layers": {"0": {"pinned": [4]}}})", "4 is not an expert index in [0, 4)"},
      {R"({"layers": {"0": {"pinned": [1.5]}}})", "1.5 is not an expert index"},
      {R"({"layers": {"0": {"pinned": ["1"]}}})", "\"1\" is not an expert index"},
      {R"({"layers": {"0": {"pinned": [1], "resident": [1]}}})",
       "expert 1 of layer 0 is placed twice"},
      {R"({"layers": {"*": {"pinned": [1]}, "2": {"resident": [1]}}})",
       "expert 1 of layer 2 is placed twice"},
  };
  for (const auto& c : cases) {
    auto p = ExpertPlacement::Parse(c.json, 3, 4, "dir/p.json");
    ASSERT_FALSE(p.ok()) << c.json;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(p.status().message().find("placement file 'dir/p.json'"), std::string::npos)
        << p.status();
    EXPECT_NE(p.status().message().find(c.says), std::string::npos)
        << c.json << " -> " << p.status();
  }
}

TEST(ExpertPlacementTest, AMissingFileIsNotFound) {
  auto p = ExpertPlacement::ReadFile("/nonexistent/placement.json", 2, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("/nonexistent/placement.json"), std::string::npos);
}

}  // namespace
}  // namespace moe
