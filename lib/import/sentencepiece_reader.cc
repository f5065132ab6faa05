#include "lib/import/sentencepiece_reader.h"

#include <exception>

#include "sentencepiece_processor.h"

namespace moe::spm_internal {
namespace {

std::string Read(const std::string& path, TokenizerData* out) {
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(path);
  if (!status.ok()) return "cannot read SentencePiece model '" + path + "': " + status.ToString();
  const int n = sp.GetPieceSize();
  out->model = "llama";
  out->pre.clear();
  out->tokens.resize(n);
  out->scores.resize(n);
  out->token_types.resize(n);
  for (int i = 0; i < n; ++i) {
    out->tokens[i] = sp.IdToPiece(i);
    out->scores[i] = sp.GetScore(i);
    TokenType type = TokenType::kNormal;
    if (sp.IsUnknown(i)) {
      type = TokenType::kUnknown;
    } else if (sp.IsControl(i)) {
      type = TokenType::kControl;
    } else if (sp.IsUnused(i)) {
      type = TokenType::kUnused;
    } else if (sp.IsByte(i)) {
      type = TokenType::kByte;
    }
    out->token_types[i] = static_cast<int32_t>(type);
  }
  out->bos_id = sp.bos_id();
  out->eos_id = sp.eos_id();
  out->unk_id = sp.unk_id();
  out->pad_id = sp.pad_id();
  // The public API does not expose normalizer_spec.add_dummy_prefix; the library's own encoding
  // of a word shows it: with the dummy prefix, the first piece starts with U+2581.
  std::vector<std::string> pieces;
  if (!sp.Encode("a", &pieces).ok()) return "cannot encode with SentencePiece model '" + path + "'";
  out->add_space_prefix = !pieces.empty() && pieces[0].rfind("\xE2\x96\x81", 0) == 0;
  return "";
}

}  // namespace

std::string ReadSentencePieceModel(const std::string& path, TokenizerData* out) {
  // The library throws from inside on some models its own checks let through (its Darts trie
  // rejects a piece that starts with a NUL byte: "zero-length key"); a corrupt file is an error
  // to report, not an uncaught exception that ends the process.
  try {
    return Read(path, out);
  } catch (const std::exception& e) {
    return "cannot read SentencePiece model '" + path + "': " + e.what();
  } catch (...) {
    return "cannot read SentencePiece model '" + path + "': the library threw";
  }
}

}  // namespace moe::spm_internal
