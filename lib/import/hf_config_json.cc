#include "lib/import/hf_config_json.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {

const nlohmann::json* ConfigJson::Get(const char* key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool ConfigJson::IsNull(const char* key) const {
  auto it = j_.find(key);
  return it != j_.end() && it->is_null();
}

absl::StatusOr<int64_t> ConfigJson::Int(const char* key, std::optional<int64_t> def) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) {
    if (def) return *def;
    return absl::NotFoundError(absl::StrCat("config.json is missing '", Name(key), "'"));
  }
  if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > (1ll << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("config.json '", Name(key), "' is ", v->dump(),
                                                   ", not a non-negative integer"));
  }
  return v->get<int64_t>();
}

absl::StatusOr<double> ConfigJson::Float(const char* key, double def) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return def;
  if (!v->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json '", Name(key), "' is ", v->dump(), ", not a number"));
  }
  return v->get<double>();
}

absl::StatusOr<bool> ConfigJson::Bool(const char* key, bool def) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return def;
  if (!v->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json '", Name(key), "' is ", v->dump(), ", not true/false"));
  }
  return v->get<bool>();
}

absl::StatusOr<std::string> ConfigJson::String(const char* key, const std::string& def) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return def;
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json '", Name(key), "' is ", v->dump(), ", not a string"));
  }
  return v->get<std::string>();
}

}  // namespace moe
