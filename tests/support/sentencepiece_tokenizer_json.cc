#include "tests/support/sentencepiece_tokenizer_json.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace moe::testing {
namespace {

using Json = nlohmann::json;

constexpr char kMarker[] = "\xe2\x96\x81";

bool IsType(const TokenizerData& d, size_t i, TokenType t) {
  return i < d.token_types.size() && d.token_types[i] == static_cast<int32_t>(t);
}

}  // namespace

Json SentencePieceTokenizerJson(const TokenizerData& d, SentencePieceJsonForm form) {
  Json vocab = Json::object();
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    vocab[d.tokens[i]] = static_cast<int32_t>(i);
    ids.emplace(d.tokens[i], static_cast<int32_t>(i));
  }
  // Merges as transformers' SentencePieceExtractor makes them: for each piece, every split into
  // two pieces of the vocabulary (ordered by their ids), all sorted by the piece's score, highest
  // first, stably.
  struct Merge {
    float score;
    int32_t left, right;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    if (IsType(d, i, TokenType::kControl) || IsType(d, i, TokenType::kUserDefined) ||
        IsType(d, i, TokenType::kUnknown) || IsType(d, i, TokenType::kByte)) {
      continue;
    }
    const std::string& piece = d.tokens[i];
    std::vector<Merge> local;
    for (size_t cut = 1; cut < piece.size(); ++cut) {
      auto l = ids.find(piece.substr(0, cut));
      auto r = ids.find(piece.substr(cut));
      if (l != ids.end() && r != ids.end()) local.push_back({d.scores[i], l->second, r->second});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return std::tie(a.left, a.right) < std::tie(b.left, b.right);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  Json merge_list = Json::array();
  for (const Merge& m : merges) merge_list.push_back(d.tokens[m.left] + " " + d.tokens[m.right]);

  Json added = Json::array();
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    const bool control = IsType(d, i, TokenType::kControl) || IsType(d, i, TokenType::kUnknown);
    if (!control && !IsType(d, i, TokenType::kUserDefined)) continue;
    added.push_back({{"id", i}, {"content", d.tokens[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", !control},
                     {"special", control}});
  }

  Json model = {{"type", "BPE"},          {"dropout", nullptr},    {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr},             {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},       {"byte_fallback", true}, {"ignore_merges", false},
                {"vocab", vocab},         {"merges", merge_list}};
  const std::string bos = d.bos_id >= 0 ? d.tokens[d.bos_id] : "<s>";
  // The post-processor: BOS, then the text.
  Json post = Json::object();
  post["type"] = "TemplateProcessing";
  post["single"] = Json::array();
  post["single"].push_back({{"SpecialToken", {{"id", bos}, {"type_id", 0}}}});
  post["single"].push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  post["pair"] = Json::array();
  Json special = Json::object();
  special["id"] = bos;
  special["ids"] = Json::array({d.bos_id});
  special["tokens"] = Json::array({bos});
  post["special_tokens"] = Json::object();
  post["special_tokens"][bos] = special;
  Json json = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
               {"added_tokens", added}, {"post_processor", post}, {"model", model}};
  if (form == SentencePieceJsonForm::kNormalizer) {
    json["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", kMarker}},
                                     {{"type", "Replace"},
                                      {"pattern", {{"String", " "}}},
                                      {"content", kMarker}}})}};
    json["pre_tokenizer"] = nullptr;
    json["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Replace"}, {"pattern", {{"String", kMarker}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  } else {
    json["normalizer"] = nullptr;
    json["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMarker},
                             {"add_prefix_space", true}};
    json["decoder"] = {{"type", "Metaspace"}, {"replacement", kMarker}, {"add_prefix_space", true}};
  }
  return json;
}

}  // namespace moe::testing
