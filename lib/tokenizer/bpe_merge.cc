#include "lib/tokenizer/bpe_merge.h"

#include <queue>

#include "lib/tokenizer/utf8.h"

namespace moe {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;
  uint32_t len;  // 0 once merged into its left neighbour
  int32_t id;
};

struct RankCandidate {
  int32_t rank;
  int32_t left;
  int32_t left_id;
  int32_t right_id;
  // Heap order: lowest rank first, then leftmost.
  bool operator<(const RankCandidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

struct ScoreCandidate {
  float score;
  int32_t left;
  uint32_t len;  // byte length of the pair when it was queued; detects stale entries
  // Heap order: highest score first, then leftmost.
  bool operator<(const ScoreCandidate& o) const {
    return score != o.score ? score < o.score : left > o.left;
  }
};

void LinkSymbols(std::vector<Symbol>* symbols) {
  const int32_t n = static_cast<int32_t>(symbols->size());
  for (int32_t i = 0; i < n; ++i) {
    (*symbols)[i].prev = i - 1;
    (*symbols)[i].next = i + 1 < n ? i + 1 : -1;
  }
}

// Unlinks right (the successor of left) after left has absorbed it.
void AbsorbRight(std::vector<Symbol>& symbols, int32_t left) {
  Symbol& l = symbols[left];
  Symbol& r = symbols[l.next];
  l.len += r.len;
  r.len = 0;
  l.next = r.next;
  if (r.next >= 0) symbols[r.next].prev = left;
}

}  // namespace

void MergeByRank(const MergeTable& merges, absl::Span<const int32_t> byte_ids,
                 std::vector<int32_t>* out) {
  std::vector<Symbol> symbols(byte_ids.size());
  for (size_t i = 0; i < byte_ids.size(); ++i) {
    symbols[i] = Symbol{0, 0, static_cast<uint32_t>(i), 1, byte_ids[i]};
  }
  LinkSymbols(&symbols);

  std::priority_queue<RankCandidate> queue;
  auto try_add = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const int32_t a = symbols[left].id, b = symbols[right].id;
    if (a < 0 || b < 0) return;
    auto it = merges.find(MergeKey(a, b));
    if (it == merges.end()) return;
    queue.push(RankCandidate{it->second.rank, left, a, b});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_add(i);

  while (!queue.empty()) {
    const RankCandidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Stale if either side changed since the candidate was queued.
    if (left.len == 0 || left.id != c.left_id || left.next < 0) continue;
    if (symbols[left.next].id != c.right_id) continue;
    left.id = merges.find(MergeKey(c.left_id, c.right_id))->second.merged_id;
    AbsorbRight(symbols, c.left);
    try_add(left.prev);
    try_add(c.left);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    out->push_back(symbols[i].id);
  }
}

void MergeByScore(absl::string_view text,
                  const absl::flat_hash_map<std::string, int32_t>& token_to_id,
                  absl::Span<const float> scores, std::vector<std::pair<uint32_t, uint32_t>>* out) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    size_t len = DecodeUtf8(text, pos, &cp);
    if (len == 0) len = 1;
    symbols.push_back(Symbol{0, 0, static_cast<uint32_t>(pos), static_cast<uint32_t>(len), -1});
    pos += len;
  }
  LinkSymbols(&symbols);

  std::priority_queue<ScoreCandidate> queue;
  auto try_add = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const uint32_t len = symbols[left].len + symbols[right].len;
    auto it = token_to_id.find(text.substr(symbols[left].begin, len));
    if (it == token_to_id.end()) return;
    const float score = it->second < static_cast<int32_t>(scores.size()) ? scores[it->second] : 0;
    queue.push(ScoreCandidate{score, left, len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_add(i);

  while (!queue.empty()) {
    const ScoreCandidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Symbols are contiguous, so an unchanged pair is recognised by its total length.
    if (left.len == 0 || left.next < 0 || left.len + symbols[left.next].len != c.len) continue;
    AbsorbRight(symbols, c.left);
    try_add(left.prev);
    try_add(c.left);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    out->emplace_back(symbols[i].begin, symbols[i].len);
  }
}

}  // namespace moe
