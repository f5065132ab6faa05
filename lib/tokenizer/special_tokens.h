// Finds special / added tokens in text: leftmost, then longest match (the way Hugging Face's
// added-token splitter works), so such tokens are never split by the BPE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace moe {

class SpecialTokenMatcher {
 public:
  // always: matched even when the caller did not ask for special tokens (user-defined added
  // tokens); otherwise only with parse_special (control tokens).
  void Add(absl::string_view text, int32_t id, bool always);

  // One segment of text: either plain text (id == -1) or a matched token.
  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;
  };
  std::vector<Segment> Partition(absl::string_view text, bool parse_special) const;

  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    absl::flat_hash_map<uint8_t, int32_t> children;
    int32_t id = -1;
    bool always = false;
  };
  std::vector<Node> nodes_{1};
};

}  // namespace moe
