// Holds back streamed text that might be the start of a stop string, so a stop string is never
// shown to the user, even when it arrives split across tokens.
#pragma once

#include <string>
#include <vector>

namespace moe {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;      // text safe to show now
    bool stopped = false;  // a stop string appeared; emit holds the text before it
  };
  Result Push(const std::string& text);
  // The text still held back (call when generation ends for another reason).
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace moe
