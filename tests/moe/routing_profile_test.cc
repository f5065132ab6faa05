// Routing profiles: what they say survives a write and a read, the hottest experts come first,
// and every malformed one is an error naming the file (never an exception).
#include "lib/moe/routing_profile.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(RoutingProfileTest, WrittenAndReadBackTheSame) {
  RoutingProfile p{{{5, 0, 2}, {1, 9, 0}}};
  const std::string path =
      ::testing::TempDir() + "/routing_profile_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE(p.WriteFile(path).ok());
  auto back = RoutingProfile::ReadFile(path, 2, 3);
  std::remove(path.c_str());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->counts, p.counts);
}

TEST(RoutingProfileTest, HottestFirstLeavesOutExpertsNeverChosen) {
  RoutingProfile p{{{5, 0, 2}, {1, 9, 5}}};
  const std::vector<ExpertKey> want = {{1, 1}, {0, 0}, {1, 2}, {0, 2}, {1, 0}};
  EXPECT_EQ(p.HottestFirst(), want);
}

TEST(RoutingProfileTest, MalformedProfilesAreErrorsThatSayWhere) {
  const char* cases[] = {
      "{",
      "[]",
      R"({"format": "something else", "version": 1, "n_layer": 2, "n_expert": 2, "counts": []})",
      R"({"format": "libmoe-routing-profile", "version": 2, "n_layer": 2, "n_expert": 2})",
      R"({"format": "libmoe-routing-profile", "version": 1, "n_layer": 3, "n_expert": 2,
          "counts": [[0, 0], [0, 0], [0, 0]]})",
      R"({"format": "libmoe-routing-profile", "version": 1, "n_layer": "2", "n_expert": 2})",
      R"({"format": "libmoe-routing-profile", "version": 1, "n_layer": 2, "n_expert": 2,
          "counts": [[1, 2]]})",
      R"({"format": "libmoe-routing-profile", "version": 1, "n_layer": 2, "n_expert": 2,
          "counts": [[1, 2], [3]]})",
      R"({"format": "libmoe-routing-profile", "version": 1, "n_layer": 2, "n_expert": 2,
          "counts": [[1, 2], [3, -4]]})",
      R"({"format": "libmoe-routing-profile", "version": 1, "n_layer": 2, "n_expert": 2,
          "counts": [[1, 2], [3, "x"]]})",
  };
  for (const char* json : cases) {
    auto p = RoutingProfile::Parse(json, 2, 2, "dir/profile.json");
    ASSERT_FALSE(p.ok()) << json;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_NE(p.status().message().find("routing profile 'dir/profile.json'"), std::string::npos)
        << p.status();
  }
  EXPECT_EQ(RoutingProfile::ReadFile("/nonexistent/p.json", 2, 2).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace moe
