#include "lib/import/sentencepiece_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/json_text.h"
#include "lib/base/status_macros.h"
#include "lib/import/sentencepiece_reader.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using Json = nlohmann::json;

// A special token named in tokenizer_config.json: a string or {"content": ...}.
std::string TokenContent(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

bool BoolOr(const Json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

// Special tokens, BOS/EOS rules and the chat template from tokenizer_config.json; the
// SentencePiece model's own ids stay unless the config names a token it has.
absl::Status ApplyTokenizerConfig(const std::filesystem::path& path, TokenizerData* data) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", path.string(), "'"));
  std::stringstream text;
  text << f.rdbuf();
  auto parsed = ParseJsonText(text.str());
  if (!parsed.ok()) return Annotate(parsed.status(), absl::StrCat("'", path.string(), "'"));
  const Json config = *std::move(parsed);
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "' is not a JSON object"));
  }
  auto find_id = [&](const std::string& s, int32_t def) {
    if (s.empty()) return def;
    for (size_t i = 0; i < data->tokens.size(); ++i) {
      if (data->tokens[i] == s) return static_cast<int32_t>(i);
    }
    return def;
  };
  data->bos_id = find_id(TokenContent(config, "bos_token"), data->bos_id);
  data->eos_id = find_id(TokenContent(config, "eos_token"), data->eos_id);
  data->unk_id = find_id(TokenContent(config, "unk_token"), data->unk_id);
  data->pad_id = find_id(TokenContent(config, "pad_token"), data->pad_id);
  data->add_bos = BoolOr(config, "add_bos_token", data->add_bos);
  data->add_eos = BoolOr(config, "add_eos_token", data->add_eos);
  if (auto it = config.find("chat_template"); it != config.end()) {
    if (it->is_string()) {
      data->chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: take "default"
      for (const Json& entry : *it) {
        if (entry.is_object() && entry.value("name", "") == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          data->chat_template = entry["template"].get<std::string>();
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerData> TokenizerDataFromSentencePiece(const std::string& model_path) {
  TokenizerData data;
  std::string error = spm_internal::ReadSentencePieceModel(model_path, &data);
  if (!error.empty()) return absl::InvalidArgumentError(error);
  data.add_bos = data.bos_id >= 0;  // LlamaTokenizer's default
  const std::filesystem::path config =
      std::filesystem::path(model_path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    absl::Status s = ApplyTokenizerConfig(config, &data);
    if (!s.ok()) return s;
  }
  return data;
}

}  // namespace moe
