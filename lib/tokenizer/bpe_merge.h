// The two BPE merge loops. Both keep the symbols of one word in a linked list and candidate
// merges in a binary heap, so a word of n symbols costs O(n log n) however long it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace moe {

// Byte-level BPE: merges by rank (lowest first, leftmost on ties). Symbols start as the ids of
// the word's single-byte tokens (-1 where a byte has none); a merge applies to a pair of
// adjacent symbol ids. Appends, for each final symbol, its id or — if it is -1 — nothing; the
// caller handles fallbacks through *unmerged (byte ranges of the word for such symbols).
struct RankedMerge {
  int32_t rank;
  int32_t merged_id;
};
using MergeTable = absl::flat_hash_map<uint64_t, RankedMerge>;
inline uint64_t MergeKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
void MergeByRank(const MergeTable& merges, absl::Span<const int32_t> byte_ids,
                 std::vector<int32_t>* out);

// SentencePiece-style BPE: symbols start as the UTF-8 characters of text (an invalid byte is a
// symbol of its own); the adjacent pair whose concatenation is the highest-scoring vocabulary
// token is merged first (leftmost on ties). Appends (begin, length) byte ranges of the final
// symbols; the caller maps them to ids (byte fallback for those not in the vocabulary).
void MergeByScore(absl::string_view text,
                  const absl::flat_hash_map<std::string, int32_t>& token_to_id,
                  absl::Span<const float> scores, std::vector<std::pair<uint32_t, uint32_t>>* out);

}  // namespace moe
