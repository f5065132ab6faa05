#include "lib/import/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/json_text.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

using Json = nlohmann::json;

// SentencePiece's word marker, U+2581.
constexpr char kSpaceMarker[] = "\xe2\x96\x81";

// GPT-2's byte-level regex, as the ByteLevel pre-tokenizer applies it when use_regex is set.
constexpr char kByteLevelRegex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

absl::StatusOr<Json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto json = ParseJsonText(buffer.str());
  if (!json.ok()) return Annotate(json.status(), path);
  return *std::move(json);
}

std::string StringOr(const Json& object, const char* key, std::string fallback = "") {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// A token id: an integer JSON number, else -1 (a float such as 4e31 would not convert safely).
int64_t IdOr(const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    return u > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(u);
  }
  return value.is_number_integer() ? value.get<int64_t>() : -1;
}

bool BoolOr(const Json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// What the pre-tokenizer and normalizer say, for the two families of BPE tokenizer.json:
// byte-level (ByteLevel pre-tokenizer) and SentencePiece-style (spaces become "▁", either by a
// Metaspace pre-tokenizer or by a Prepend + Replace normalizer, with byte fallback).
struct PreTokenizerState {
  std::vector<std::string> regexes;
  bool byte_level = false;
  bool add_prefix_space = false;
  bool metaspace = false;          // spaces become "▁" (Metaspace, or Replace " " -> "▁")
  bool marker_prefix = false;      // "▁" is put before the text (Metaspace's scheme, or Prepend)
  std::string unicode_normalizer;  // "" or "NFC"
};

absl::Status ParsePreTokenizer(const Json& pre, PreTokenizerState* state) {
  if (pre.is_null()) return absl::OkStatus();
  const std::string type = StringOr(pre, "type");
  if (type == "Sequence") {
    for (const Json& child : pre.value("pretokenizers", Json::array())) {
      MOE_RETURN_IF_ERROR(ParsePreTokenizer(child, state));
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    if (StringOr(pre, "behavior") != "Isolated" || BoolOr(pre, "invert", false)) {
      return absl::UnimplementedError(
          absl::StrCat("Split pre-tokenizer behavior '", StringOr(pre, "behavior"),
                       "' (invert=", BoolOr(pre, "invert", false), ") is not supported"));
    }
    const Json& pattern = pre.value("pattern", Json::object());
    if (pattern.contains("Regex")) {
      state->regexes.push_back(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String")) {
      state->regexes.push_back(absl::StrCat("\\Q", pattern["String"].get<std::string>(), "\\E"));
    } else {
      return absl::InvalidArgumentError("Split pre-tokenizer without a pattern");
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    state->byte_level = true;
    state->add_prefix_space = BoolOr(pre, "add_prefix_space", false);
    if (BoolOr(pre, "use_regex", true)) state->regexes.push_back(kByteLevelRegex);
    return absl::OkStatus();
  }
  if (type == "Digits") {
    state->regexes.push_back(BoolOr(pre, "individual_digits", false) ? "\\p{N}" : "\\p{N}+");
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    if (StringOr(pre, "replacement", kSpaceMarker) != kSpaceMarker) {
      return absl::UnimplementedError("Metaspace pre-tokenizer with a replacement other than ▁");
    }
    state->metaspace = true;
    // Older files say add_prefix_space, newer ones prepend_scheme ("always", "first", "never").
    const std::string scheme =
        StringOr(pre, "prepend_scheme", BoolOr(pre, "add_prefix_space", true) ? "always" : "never");
    state->marker_prefix = scheme != "never";
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("tokenizer.json pre-tokenizer '", type, "' is not supported"));
}

absl::Status ParseNormalizer(const Json& normalizer, PreTokenizerState* state) {
  if (normalizer.is_null()) return absl::OkStatus();
  const std::string type = StringOr(normalizer, "type");
  if (type == "Sequence") {
    for (const Json& child : normalizer.value("normalizers", Json::array())) {
      MOE_RETURN_IF_ERROR(ParseNormalizer(child, state));
    }
    return absl::OkStatus();
  }
  if (type == "NFC") {
    state->unicode_normalizer = "NFC";
    return absl::OkStatus();
  }
  // The SentencePiece convention as normalizers (Mistral's and Mixtral's files).
  if (type == "Prepend" && StringOr(normalizer, "prepend") == kSpaceMarker) {
    state->marker_prefix = true;
    return absl::OkStatus();
  }
  if (type == "Replace") {
    const Json& pattern = normalizer.value("pattern", Json::object());
    if (pattern.is_object() && StringOr(pattern, "String") == " " &&
        StringOr(normalizer, "content") == kSpaceMarker) {
      state->metaspace = true;
      return absl::OkStatus();
    }
    return absl::UnimplementedError(
        "tokenizer.json Replace normalizer other than ' ' -> '▁' is not supported");
  }
  return absl::UnimplementedError(
      absl::StrCat("tokenizer.json normalizer '", type, "' is not supported"));
}

// A special token named in tokenizer_config.json: a string or {"content": ...}.
std::string TokenContent(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return StringOr(*it, "content");
  return "";
}

// The special tokens the TemplateProcessing post-processors (possibly inside a Sequence) put first
// in a single sequence, in order.
void TemplateFirstSpecialTokens(const Json& post, std::vector<std::string>* out) {
  if (post.is_null() || !post.is_object()) return;
  const std::string type = StringOr(post, "type");
  if (type == "Sequence") {
    for (const Json& child : post.value("processors", Json::array())) {
      TemplateFirstSpecialTokens(child, out);
    }
    return;
  }
  if (type != "TemplateProcessing") return;
  const Json& single = post.value("single", Json::array());
  if (single.empty() || !single[0].contains("SpecialToken")) return;
  std::string id = StringOr(single[0]["SpecialToken"], "id");
  if (!id.empty()) out->push_back(std::move(id));
}

// SentencePiece-style BPE ranks its merges; the "llama" tokenizer merges by piece score, so each
// piece scores by the first merge that makes it: lower rank, higher score. The same merge order,
// and llama.cpp's reading of a SentencePiece BPE vocabulary (whose scores rank the pieces the
// same way). Pieces no merge makes (characters, bytes, special tokens) score lowest.
void ScoresFromMerges(TokenizerData* data) {
  absl::flat_hash_map<std::string, int32_t> ids;
  for (size_t i = 0; i < data->tokens.size(); ++i) ids.emplace(data->tokens[i], i);
  data->scores.assign(data->tokens.size(), -1e30f);
  std::vector<bool> scored(data->tokens.size(), false);
  for (size_t rank = 0; rank < data->merges.size(); ++rank) {
    const std::string& merge = data->merges[rank];
    const size_t space = merge.find(' ');
    if (space == std::string::npos) continue;
    auto it = ids.find(merge.substr(0, space) + merge.substr(space + 1));
    if (it == ids.end() || scored[it->second]) continue;
    scored[it->second] = true;
    data->scores[it->second] = -static_cast<float>(rank);
  }
}

absl::Status Read(const std::string& path, TokenizerData* data) {
  MOE_ASSIGN_OR_RETURN(Json json, ReadJson(path));
  const Json& model = json.value("model", Json::object());
  const std::string model_type = StringOr(model, "type", "BPE");
  if (model_type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.json model '", model_type, "' is not supported (only BPE)"));
  }
  PreTokenizerState pre;
  MOE_RETURN_IF_ERROR(ParsePreTokenizer(json.value("pre_tokenizer", Json()), &pre));
  MOE_RETURN_IF_ERROR(ParseNormalizer(json.value("normalizer", Json()), &pre));
  const bool sentencepiece = !pre.byte_level && pre.metaspace;
  if (!pre.byte_level && !sentencepiece) {
    return absl::UnimplementedError(
        "tokenizer.json BPE with neither a ByteLevel pre-tokenizer nor SentencePiece's ▁ for "
        "spaces (a Metaspace pre-tokenizer, or a Replace ' ' -> '▁' normalizer) is not supported");
  }
  data->normalizer = pre.unicode_normalizer;
  if (sentencepiece) {
    // Words are not split: like SentencePiece and llama.cpp, merges run over the whole text.
    data->model = "llama";
    data->add_space_prefix = pre.marker_prefix;
  } else {
    data->model = "gpt2";
    data->pre_regexes = pre.regexes;
    if (data->pre_regexes.empty()) data->pre = "none";
    data->add_space_prefix = pre.add_prefix_space;
    data->ignore_merges = BoolOr(model, "ignore_merges", false);
  }

  // Vocabulary plus added tokens; ids may leave holes, which stay empty and unused.
  const Json& vocab = model.value("vocab", Json::object());
  absl::flat_hash_map<int64_t, std::string> by_id;
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = IdOr(it.value());
    if (id < 0 || id > INT32_MAX) return absl::InvalidArgumentError("vocabulary id out of range");
    by_id[id] = it.key();
    max_id = std::max(max_id, id);
  }
  const Json& added = json.value("added_tokens", Json::array());
  for (const Json& token : added) {
    const int64_t id = token.is_object() && token.contains("id") ? IdOr(token["id"]) : -1;
    if (id < 0 || id > INT32_MAX) return absl::InvalidArgumentError("added token id out of range");
    max_id = std::max(max_id, id);
  }
  // Ids may leave holes, but not a vocabulary mostly made of them: a huge id is a corrupt file,
  // not a reason to allocate gigabytes.
  const int64_t entries = static_cast<int64_t>(by_id.size() + added.size());
  if (max_id >= 2 * entries + 1024) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", max_id, " is far beyond the ",
                                                   entries, " tokens the file defines"));
  }
  data->tokens.assign(max_id + 1, "");
  data->token_types.assign(max_id + 1, static_cast<int32_t>(TokenType::kUnused));
  for (auto& [id, text] : by_id) {
    data->tokens[id] = std::move(text);
    data->token_types[id] = static_cast<int32_t>(TokenType::kNormal);
  }
  for (const Json& token : added) {
    const int64_t id = IdOr(token["id"]);
    data->tokens[id] = StringOr(token, "content");
    data->token_types[id] = static_cast<int32_t>(
        BoolOr(token, "special", false) ? TokenType::kControl : TokenType::kUserDefined);
  }

  for (const Json& merge : model.value("merges", Json::array())) {
    if (merge.is_string()) {
      data->merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2) {
      data->merges.push_back(
          absl::StrCat(merge[0].get<std::string>(), " ", merge[1].get<std::string>()));
    } else {
      return absl::InvalidArgumentError("malformed merge in tokenizer.json");
    }
  }

  auto find_id = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (size_t i = 0; i < data->tokens.size(); ++i) {
      if (data->tokens[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
  };
  data->unk_id = find_id(StringOr(model, "unk_token"));
  if (sentencepiece) {
    ScoresFromMerges(data);
    if (data->unk_id >= 0) {
      data->token_types[data->unk_id] = static_cast<int32_t>(TokenType::kUnknown);
    }
    // Byte fallback: pieces <0x00>..<0xFF> stand for raw bytes.
    for (size_t i = 0; i < data->tokens.size(); ++i) {
      const std::string& t = data->tokens[i];
      if (data->token_types[i] == static_cast<int32_t>(TokenType::kNormal) && t.size() == 6 &&
          t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<uint8_t>(t[3])) &&
          std::isxdigit(static_cast<uint8_t>(t[4]))) {
        data->token_types[i] = static_cast<int32_t>(TokenType::kByte);
      }
    }
  }

  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  Json config = Json::object();
  if (std::filesystem::exists(config_path)) {
    MOE_ASSIGN_OR_RETURN(config, ReadJson(config_path.string()));
  }
  data->bos_id = find_id(TokenContent(config, "bos_token"));
  data->eos_id = find_id(TokenContent(config, "eos_token"));
  // Without a tokenizer_config.json: BOS is the special token the post-processor puts first, and
  // for SentencePiece vocabularies EOS is their "</s>".
  std::vector<std::string> template_first;
  TemplateFirstSpecialTokens(json.value("post_processor", Json()), &template_first);
  if (data->bos_id < 0 && !template_first.empty()) data->bos_id = find_id(template_first[0]);
  if (data->eos_id < 0 && sentencepiece) data->eos_id = find_id("</s>");
  data->pad_id = find_id(TokenContent(config, "pad_token"));
  if (const int32_t unk = find_id(TokenContent(config, "unk_token")); unk >= 0) data->unk_id = unk;
  // BOS: the config's explicit flag, else whether the post-processor template starts with it.
  const bool template_starts_with_bos =
      data->bos_id >= 0 && std::find(template_first.begin(), template_first.end(),
                                     data->tokens[data->bos_id]) != template_first.end();
  // The ids generation_config.json gives as eos_token_id (one or a list) all end generation, as
  // transformers' generate() stops at any of them: GLM-4.5 lists <|user|> and <|observation|>
  // beside <|endoftext|>, gpt-oss <|return|> and <|call|>, Qwen3 <|im_end|>.
  const std::filesystem::path generation_path =
      std::filesystem::path(path).parent_path() / "generation_config.json";
  if (std::filesystem::exists(generation_path)) {
    MOE_ASSIGN_OR_RETURN(Json generation, ReadJson(generation_path.string()));
    const Json eos = generation.is_object() ? generation.value("eos_token_id", Json()) : Json();
    for (const Json& value : eos.is_array() ? eos : Json::array({eos})) {
      const int64_t id = IdOr(value);  // out of the vocabulary: dropped by the Tokenizer
      if (id >= 0 && id <= INT32_MAX && id != data->eos_id) {
        data->eog_ids.push_back(static_cast<int32_t>(id));
      }
    }
  }
  data->add_bos = BoolOr(config, "add_bos_token", template_starts_with_bos);
  data->add_eos = BoolOr(config, "add_eos_token", false);
  if (auto it = config.find("chat_template"); it != config.end()) {
    if (it->is_string()) {
      data->chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: take "default"
      for (const Json& entry : *it) {
        if (StringOr(entry, "name") == "default") data->chat_template = StringOr(entry, "template");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerData> TokenizerDataFromHfJson(const std::string& tokenizer_json_path) {
  TokenizerData data;
  absl::Status status;
  try {
    status = Read(tokenizer_json_path, &data);
  } catch (const nlohmann::json::exception& e) {
    // A field of an unexpected JSON type: the file is not a tokenizer.json we understand.
    status = absl::InvalidArgumentError(absl::StrCat("malformed tokenizer.json: ", e.what()));
  }
  MOE_RETURN_IF_ERROR(Annotate(status, absl::StrCat("reading ", tokenizer_json_path)));
  return data;
}

}  // namespace moe
