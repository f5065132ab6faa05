#include "lib/import/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

using Json = nlohmann::json;

// GPT-2's byte-level regex, as the ByteLevel pre-tokenizer applies it when use_regex is set.
constexpr char kByteLevelRegex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

absl::StatusOr<Json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  Json json = Json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, " is not JSON"));
  return json;
}

std::string StringOr(const Json& object, const char* key, std::string fallback = "") {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool BoolOr(const Json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

struct PreTokenizerState {
  std::vector<std::string> regexes;
  bool byte_level = false;
  bool add_prefix_space = false;
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
  return absl::UnimplementedError(
      absl::StrCat("tokenizer.json pre-tokenizer '", type, "' is not supported"));
}

absl::Status ParseNormalizer(const Json& normalizer, std::string* out) {
  if (normalizer.is_null()) return absl::OkStatus();
  const std::string type = StringOr(normalizer, "type");
  if (type == "Sequence") {
    for (const Json& child : normalizer.value("normalizers", Json::array())) {
      MOE_RETURN_IF_ERROR(ParseNormalizer(child, out));
    }
    return absl::OkStatus();
  }
  if (type == "NFC") {
    *out = "NFC";
    return absl::OkStatus();
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

// True when a TemplateProcessing post-processor (possibly inside a Sequence) puts token_id
// first in a single sequence.
bool TemplateStartsWith(const Json& post, int32_t token_id, const TokenizerData& data) {
  if (post.is_null() || token_id < 0) return false;
  const std::string type = StringOr(post, "type");
  if (type == "Sequence") {
    for (const Json& child : post.value("processors", Json::array())) {
      if (TemplateStartsWith(child, token_id, data)) return true;
    }
    return false;
  }
  if (type != "TemplateProcessing") return false;
  const Json& single = post.value("single", Json::array());
  if (single.empty() || !single[0].contains("SpecialToken")) return false;
  return StringOr(single[0]["SpecialToken"], "id") == data.tokens[token_id];
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
  if (!pre.byte_level) {
    return absl::UnimplementedError(
        "tokenizer.json BPE without a ByteLevel pre-tokenizer (SentencePiece-style Metaspace "
        "vocabularies) is not supported; convert it to GGUF");
  }
  MOE_RETURN_IF_ERROR(ParseNormalizer(json.value("normalizer", Json()), &data->normalizer));
  data->model = "gpt2";
  data->pre_regexes = pre.regexes;
  if (data->pre_regexes.empty()) data->pre = "none";
  data->add_space_prefix = pre.add_prefix_space;
  data->ignore_merges = BoolOr(model, "ignore_merges", false);

  // Vocabulary plus added tokens; ids may leave holes, which stay empty and unused.
  const Json& vocab = model.value("vocab", Json::object());
  absl::flat_hash_map<int64_t, std::string> by_id;
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX) return absl::InvalidArgumentError("vocabulary id out of range");
    by_id[id] = it.key();
    max_id = std::max(max_id, id);
  }
  const Json& added = json.value("added_tokens", Json::array());
  for (const Json& token : added) {
    const int64_t id = token.value("id", int64_t{-1});
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
    const int64_t id = token["id"].get<int64_t>();
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

  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  Json config = Json::object();
  if (std::filesystem::exists(config_path)) {
    MOE_ASSIGN_OR_RETURN(config, ReadJson(config_path.string()));
  }
  data->bos_id = find_id(TokenContent(config, "bos_token"));
  data->eos_id = find_id(TokenContent(config, "eos_token"));
  data->pad_id = find_id(TokenContent(config, "pad_token"));
  if (const int32_t unk = find_id(TokenContent(config, "unk_token")); unk >= 0) data->unk_id = unk;
  // BOS: the config's explicit flag, else whether the post-processor template starts with it.
  data->add_bos =
      BoolOr(config, "add_bos_token",
             TemplateStartsWith(json.value("post_processor", Json()), data->bos_id, *data));
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
