#include "lib/tokenizer/special_tokens.h"

namespace moe {

void SpecialTokenMatcher::Add(absl::string_view text, int32_t id, bool always) {
  if (text.empty()) return;
  int32_t node = 0;
  for (char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    auto it = nodes_[node].children.find(byte);
    if (it == nodes_[node].children.end()) {
      nodes_.emplace_back();
      it = nodes_[node].children.emplace(byte, static_cast<int32_t>(nodes_.size() - 1)).first;
    }
    node = it->second;
  }
  // The first registration of a text wins (tokens are added in id order).
  if (nodes_[node].id < 0) {
    nodes_[node].id = id;
    nodes_[node].always = always;
  }
}

std::vector<SpecialTokenMatcher::Segment> SpecialTokenMatcher::Partition(absl::string_view text,
                                                                         bool parse_special) const {
  std::vector<Segment> segments;
  size_t plain_begin = 0;
  size_t pos = 0;
  const auto& root = nodes_[0].children;
  while (pos < text.size()) {
    int32_t match_id = -1;
    size_t match_end = 0;
    if (root.contains(static_cast<uint8_t>(text[pos]))) {
      int32_t node = 0;
      for (size_t i = pos; i < text.size(); ++i) {
        auto it = nodes_[node].children.find(static_cast<uint8_t>(text[i]));
        if (it == nodes_[node].children.end()) break;
        node = it->second;
        if (nodes_[node].id >= 0 && (parse_special || nodes_[node].always)) {
          match_id = nodes_[node].id;
          match_end = i + 1;
        }
      }
    }
    if (match_id < 0) {
      ++pos;
      continue;
    }
    if (pos > plain_begin) segments.push_back({plain_begin, pos, -1});
    segments.push_back({pos, match_end, match_id});
    pos = plain_begin = match_end;
  }
  if (text.size() > plain_begin) segments.push_back({plain_begin, text.size(), -1});
  return segments;
}

}  // namespace moe
