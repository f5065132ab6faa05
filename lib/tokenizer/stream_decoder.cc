#include "lib/tokenizer/stream_decoder.h"

#include "lib/base/status_macros.h"
#include "lib/tokenizer/utf8.h"

namespace moe {

absl::StatusOr<std::string> StreamDecoder::Add(int32_t id) {
  MOE_ASSIGN_OR_RETURN(std::string piece, tokenizer_.TokenToPiece(id, options_));
  if (strip_space_) {
    strip_space_ = false;
    if (tokenizer_.strips_leading_space() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    char32_t cp;
    const size_t len = DecodeUtf8(pending_, pos, &cp);
    if (len > 0) {
      out.append(pending_, pos, len);
      pos += len;
    } else if (IsIncompleteUtf8(pending_, pos)) {
      break;  // wait for the rest of the character
    } else {
      AppendUtf8(kReplacementChar, &out);
      ++pos;
    }
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  if (!pending_.empty()) AppendUtf8(kReplacementChar, &out);
  pending_.clear();
  return out;
}

}  // namespace moe
