// The interleaved multimodal RoPE's pairs for text (llama.cpp's IMROPE with the extra position
// 0): which pairs turn with the token's position.
#include "lib/model/parts/rope_params.h"

#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

std::vector<int64_t> StillPairs(const std::array<int64_t, 4>& sections, int64_t pairs) {
  std::vector<int64_t> still;
  for (int64_t i = 0; i < pairs; ++i) {
    if (!MultimodalPairTurnsForText(sections, i)) still.push_back(i);
  }
  return still;
}

TEST(RopeParamsTest, MultimodalPairsThatDoNotTurnForText) {
  // Qwen3-VL's sections over its 64 pairs: temporal every third pair from 0, height from 1 and
  // width from 2 while theirs last (20 each: up to pair 59), so 61 and 62 fall to the extra.
  EXPECT_EQ(StillPairs({24, 20, 20, 0}, 64), (std::vector<int64_t>{61, 62}));
  EXPECT_EQ(StillPairs({6, 5, 5, 0}, 16), (std::vector<int64_t>{}));
  EXPECT_EQ(StillPairs({12, 10, 10, 0}, 32), (std::vector<int64_t>{31}));
  // The extra section's own pairs, and the sections repeating past their sum (ggml's i % sum).
  EXPECT_EQ(StillPairs({2, 1, 1, 2}, 12), (std::vector<int64_t>{4, 5, 10, 11}));
}

}  // namespace
}  // namespace moe
