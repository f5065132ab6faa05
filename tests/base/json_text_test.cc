#include "lib/base/json_text.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(JsonTextTest, ParsesADocument) {
  auto doc = ParseJsonText(R"({"layers": {"0": {"pinned": [1, 2]}}})");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ((*doc)["layers"]["0"]["pinned"][1], 2);
}

TEST(JsonTextTest, AnErrorSaysWhereTheTextGoesWrong) {
  // A stray comma on the second line: the parser's place, without its exception tag.
  auto doc = ParseJsonText("{\"a\": 1,\n \"b\": [1,,2]}");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(doc.status().message());
  EXPECT_TRUE(absl::StartsWith(message, "not valid JSON: parse error at line 2, column 10"))
      << message;
  EXPECT_FALSE(absl::StrContains(message, "[json.exception")) << message;
  EXPECT_FALSE(ParseJsonText("").ok());
  EXPECT_FALSE(ParseJsonText("{\"a\": ").ok());
}

}  // namespace
}  // namespace moe
